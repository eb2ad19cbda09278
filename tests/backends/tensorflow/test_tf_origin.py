"""Issue #34 for Keras 3 and tf_keras: where an fp16 run fails (a custom layer's own operation, the
upstream cause), the gradients a real LossScaleOptimizer step checks (variables' gradients, against
real steps on the same batch: a planted Dense and keras.applications.ResNet50), the float16 output
layer, and batches that fit the model. Bodies in tf_origin_cases.py; several per fresh interpreter
(one TensorFlow import each)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.tensorflow

ROOT = os.path.dirname(os.path.abspath(__file__))


def _run(*calls: str) -> str:
    code = "import tf_origin_cases as c; " + "; ".join(f"c.{call}" for call in calls)
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{code} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return r.stdout


@pytest.mark.slow
@pytest.mark.parametrize("flavor", ["keras", "tf_keras"])
def test_keras_origin_cause_kernel_gradient_and_inputs(flavor):
    """Acceptance 2 (the custom layer 'attn' and its matmul named; its fp32 code, applied, makes the step
    finite; the what-if predicts it there), 3 (the upstream cause), 5 (a kernel gradient alone overflows:
    the audit skips as a real LossScaleOptimizer does, to the same scale; an underflow that the measured kernel
    gradients show costs nothing is no finding) and 6 (valid token ids, pixels)."""
    pytest.importorskip(flavor)
    out = _run(f"custom_layer({flavor!r})", f"upstream_cause({flavor!r})", f"kernel_gradient({flavor!r})",
               f"harmless_underflow({flavor!r})", f"fitting_batches({flavor!r})")
    for what in ("custom layer", "upstream cause", "kernel gradient", "harmless underflow", "fitting batches"):
        assert f"{flavor} {what}: ok" in out, out


@pytest.mark.slow
def test_keras_application_audit_agrees_with_real_loss_scale_optimizer_steps():
    """Acceptance 5 on keras.applications.ResNet50 (32x32, batch 8): the skipped steps, the scale it trains
    at and the overflowing kernel as real LossScaleOptimizer steps on the same batch show them; the float16
    softmax head is a finding; EfficientNetB0's built-in preprocessing gets pixels in [0, 255]."""
    out = _run("application('keras')", "application_inputs('keras')")
    assert "keras ResNet50: ok" in out and "keras application inputs: ok" in out, out
