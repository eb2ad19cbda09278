"""Issue #34 for Keras 3 and tf_keras: where an fp16 run fails (a custom layer's own operation, the
upstream cause), the gradients a real LossScaleOptimizer step checks (variables' gradients, against
real steps on the same batch: a planted Dense and keras.applications.ResNet50), the float16 output
layer, and batches that fit the model. Bodies in tf_origin_cases.py; those of one flavor, whichever test
they belong to, in one fresh interpreter (one TensorFlow import each)."""

from __future__ import annotations

import importlib.util

import pytest
from shared_child import run_selected, verdict

pytestmark = pytest.mark.tensorflow



#: test -> (its flavor, its calls of tf_origin_cases) from the test's parameters; the tests of one flavor
#: share one child (shared_child.py), their calls in this order
TESTS = {
    "test_keras_origin_cause_kernel_gradient_and_inputs": lambda p: (p["flavor"], [
        [name, p["flavor"]] for name in ("custom_layer", "upstream_cause", "kernel_gradient", "harmless_underflow",
                                         "fitting_batches")]),
    "test_keras_application_audit_agrees_with_real_loss_scale_optimizer_steps":
        lambda p: ("keras", [["application", "keras"], ["application_inputs", "keras"]]),
}


@pytest.fixture(scope="module")
def shared_runs(request, tmp_path_factory) -> dict:
    return run_selected(request, tmp_path_factory, "tf_origin_cases", TESTS)


@pytest.mark.slow
@pytest.mark.parametrize("flavor", ["keras", "tf_keras"])
def test_keras_origin_cause_kernel_gradient_and_inputs(flavor, shared_runs, request):
    """Acceptance 2 (the custom layer 'attn' and its matmul named; its fp32 code, applied, makes the step
    finite; the what-if predicts it there), 3 (the upstream cause), 5 (a kernel gradient alone overflows:
    the audit skips as a real LossScaleOptimizer does, to the same scale; an underflow that the measured kernel
    gradients show costs nothing is no finding) and 6 (valid token ids, pixels)."""
    if importlib.util.find_spec(flavor) is None:  # not importorskip: it would load TensorFlow in this process
        pytest.skip(f"needs {flavor}")
    out = verdict(shared_runs, flavor, request)  # custom_layer, upstream_cause, kernel_gradient, ... (TESTS)
    for what in ("custom layer", "upstream cause", "kernel gradient", "harmless underflow", "fitting batches"):
        assert f"{flavor} {what}: ok" in out, out


@pytest.mark.slow
def test_keras_application_audit_agrees_with_real_loss_scale_optimizer_steps(shared_runs, request):
    """Acceptance 5 on keras.applications.ResNet50 (32x32, batch 8): the skipped steps, the scale it trains
    at and the overflowing kernel as real LossScaleOptimizer steps on the same batch show them; the float16
    softmax head is a finding; EfficientNetB0's built-in preprocessing gets pixels in [0, 255]."""
    out = verdict(shared_runs, "keras", request)  # application, application_inputs, after the Keras 3 origin cases
    assert "keras ResNet50: ok" in out and "keras application inputs: ok" in out, out
