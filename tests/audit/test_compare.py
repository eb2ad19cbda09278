"""The one relative-error rule (ampkit.compare) every audit path uses, pinned with exact values."""

import math

import numpy as np
import pytest

from ampkit.compare import array_relative_error, relative_error
from ampkit.formats import BF16, FP16, FP32


def test_identical_values_and_both_zero_are_exactly_zero():
    assert relative_error(0.0, 0.0, 8, FP16) == 0.0          # 0 / 0
    assert relative_error(0.0, 3.0, 8, FP16) == 0.0
    assert array_relative_error(np.zeros(4), np.zeros(4), BF16) == 0.0


def test_a_zero_reference_divides_by_the_formats_floor_not_by_zero():
    # x / 0 -> x / (sqrt(size) * smallest normal): finite, and exact for powers of two
    assert relative_error(2.0**-14, 0.0, 4, FP16) == 0.5      # floor sqrt(4) * 2**-14
    assert relative_error(1.0, 0.0, 1, FP16) == 2.0**14
    assert relative_error(1.0, 0.0, 0, FP16) == 2.0**14       # an empty tensor counts as one value
    assert relative_error(2.0**-100, 0.0, 16, BF16) == 2.0**-100 / (4 * 2.0**-126)
    assert relative_error(2.0**-100, 0.0, 1, FP32) == 2.0**26  # float32's floor for optimizer-side values
    # a tiny reference below the floor is floored too; above it, the plain ratio
    assert relative_error(2.0**-15, 2.0**-20, 1, FP16) == 0.5
    assert relative_error(1.0, 4.0, 4, FP16) == 0.25


@pytest.mark.parametrize("dist, ref", [(math.inf, 1.0), (math.nan, 1.0), (1.0, math.inf), (1.0, math.nan),
                                       (math.nan, math.nan), (math.inf, 0.0), (0.0, math.nan)])
def test_anything_non_finite_is_inf_never_nan(dist, ref):
    assert relative_error(dist, ref, 4, BF16) == math.inf


def test_inf_keeps_its_place_in_a_maximum_whatever_the_order():
    errs = [0.1, relative_error(math.nan, 1.0, 4, BF16), 0.2]
    assert max(errs) == max(reversed(errs)) == math.inf


def test_arrays_and_lists_of_arrays_share_one_norm():
    a, r = np.array([3.0, 4.0]), np.array([0.0, 0.0])
    assert array_relative_error(a, a + 1.0, BF16) == pytest.approx(math.sqrt(2) / math.sqrt(16 + 25))
    # two outputs of one layer: the norms over all values together
    assert array_relative_error([np.array([1.0]), np.array([2.0])], [np.array([1.0]), np.array([4.0])], BF16) \
        == pytest.approx(2.0 / math.sqrt(17))
    assert array_relative_error(a, r, FP16) == 5.0 / (math.sqrt(2) * 2.0**-14)
    assert array_relative_error(np.array([np.inf, 1.0]), np.array([1.0, 1.0]), BF16) == math.inf
    assert array_relative_error(np.array([np.nan]), np.array([1.0]), BF16) == math.inf


def test_the_torch_adapter_applies_the_same_rule():
    torch = pytest.importorskip("torch")
    from ampkit.backends.torch.numerics.compare import tensor_relative_error

    z = torch.zeros(4)
    assert tensor_relative_error(z, z, FP16) == 0.0
    assert tensor_relative_error(torch.full((4,), 2.0**-14), z, FP16) == 1.0  # ||x|| = 2 * 2**-14 over the floor
    assert tensor_relative_error(torch.tensor([float("inf"), 1.0]), torch.ones(2), BF16) == math.inf
    assert tensor_relative_error(torch.tensor([float("nan")]), torch.ones(1), BF16) == math.inf
    assert tensor_relative_error(torch.ones(2), torch.ones(3), BF16) is None
    assert tensor_relative_error(None, torch.ones(3), BF16) is None
    # against a third tensor's norm (compile: compiled vs eager, over the float32 reference)
    assert tensor_relative_error(torch.tensor([1.0, 1.0]), torch.tensor([1.0, 0.0]), BF16,
                                 torch.tensor([0.0, 2.0])) == 0.5
