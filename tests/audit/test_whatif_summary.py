"""One what-if summary for both frameworks (ampkit.audit.whatif_summary): the PyTorch and the Keras
backends call the same function, and only their dtype casts differ; on the same values they agree."""

import math

import numpy as np
import pytest

from ampkit.audit.whatif import NBINS
from ampkit.summaries import summarize

ml_dtypes = pytest.importorskip("ml_dtypes")
torch = pytest.importorskip("torch")

_ML = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


def ml_cast(a, kind):
    return a.astype(_ML[kind]).astype(np.float32)


def test_torch_and_ml_dtypes_casts_give_the_same_summary():
    from ampkit.backends.torch.numerics.summary import summarize as torch_summarize

    g = torch.Generator().manual_seed(3)
    x = torch.randn(64, 48, generator=g) * torch.logspace(-10, 4, 48)
    x[0, :3] = 0.0
    for fp8 in (None, "e4m3", "e5m2"):
        a, b = torch_summarize(x, fp8), summarize(x.numpy(), ml_cast, fp8)
        assert (a.count, a.nonzero, a.amax, a.hist, a.rounding, a.fp8) == (b.count, b.nonzero, b.amax, b.hist,
                                                                           b.rounding, b.fp8)
    assert set(a.fp8) == {"tensorwise", "rowwise", "channelwise", "block32"}


def test_exact_counts_and_the_non_finite_rule():
    x = np.array([0.0, 1.0, -3.0, 2.0**-20, np.inf], dtype=np.float32)
    s = summarize(x, ml_cast)
    # inf counts among the nonzero values and in the amax, not in the histogram of finite exponents
    assert (s.count, s.nonzero, s.amax, sum(s.hist)) == (5, 4, math.inf, 3)
    assert len(s.hist) == NBINS
    assert summarize(np.array([np.nan, 1.0], dtype=np.float32), ml_cast).amax != summarize(
        np.array([np.nan, 1.0], dtype=np.float32), ml_cast).amax  # NaN propagates to the amax
    only_fp8 = summarize(np.ones((4, 8), np.float32), ml_cast, "e4m3", basic=False)
    assert only_fp8.nonzero == 0 and only_fp8.rounding == {} and only_fp8.fp8["tensorwise"][:2] == [32.0, 32.0]
    assert summarize(np.zeros(0, np.float32), ml_cast).count == 0
