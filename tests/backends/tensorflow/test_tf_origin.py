"""Issue #34 for Keras 3 and tf_keras: where an fp16 run fails (a custom layer's own operation, the
upstream cause), the gradients a real LossScaleOptimizer step checks (variables' gradients, against
real steps on the same batch: a planted Dense and keras.applications.ResNet50), the float16 output
layer, and batches that fit the model. Bodies in tf_origin_cases.py; those of one flavor, whichever test
they belong to, in one fresh interpreter (one TensorFlow import each)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.tensorflow

ROOT = os.path.dirname(os.path.abspath(__file__))


# The selected tests of one flavor share one fresh interpreter (one TensorFlow import instead of one per
# test: several seconds apiece on a 2-core CPU), their calls in the order of TESTS; a test's calls run one
# after another until one fails, its verdict its own (written after each test, so a crash names the test).
_SHARED_CHILD = textwrap.dedent('''
    import contextlib, io, json, sys, traceback
    import tf_origin_cases as c
    out, done = sys.argv[1], {}
    for key, calls in json.loads(sys.argv[2]).items():
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                for call in calls:
                    eval("c." + call)
            done[key] = [None, printed.getvalue()]
        except BaseException:
            done[key] = [traceback.format_exc(), printed.getvalue()]
        with open(out, "w") as fh:
            json.dump(done, fh)
''')

#: test -> (its flavor, its calls of tf_origin_cases) from the test's parameters; a child runs them in this order
TESTS = {
    "test_keras_origin_cause_kernel_gradient_and_inputs": lambda p: (p["flavor"], [
        f"custom_layer({p['flavor']!r})", f"upstream_cause({p['flavor']!r})", f"kernel_gradient({p['flavor']!r})",
        f"harmless_underflow({p['flavor']!r})", f"fitting_batches({p['flavor']!r})"]),
    "test_keras_application_audit_agrees_with_real_loss_scale_optimizer_steps":
        lambda p: ("keras", ["application('keras')", "application_inputs('keras')"]),
}


def _key(item) -> str:
    callspec = getattr(item, "callspec", None)
    return f"{item.originalname}[{callspec.id}]" if callspec else item.originalname


@pytest.fixture(scope="module")
def shared_runs(request, tmp_path_factory) -> dict:
    """Runs, one child per flavor, the calls of each selected item (all, or those -k chose) of TESTS whose
    flavor is installed: {flavor: ({item key: [traceback or None, stdout]}, r)}."""
    chosen = {}
    for test, calls in TESTS.items():
        for item in request.session.items:
            if getattr(item, "module", None) is request.module and item.originalname == test:
                flavor, todo = calls(item.callspec.params if hasattr(item, "callspec") else {})
                if importlib.util.find_spec(flavor) is not None:  # else the test skips (importorskip)
                    chosen.setdefault(flavor, {})[_key(item)] = todo
    results = {}
    for flavor, calls in chosen.items():
        out = tmp_path_factory.mktemp(f"tf_origin_{flavor}") / "done.json"
        r = subprocess.run([sys.executable, "-c", _SHARED_CHILD, str(out), json.dumps(calls)], cwd=ROOT,
                           capture_output=True, text=True, timeout=900)
        results[flavor] = (json.loads(out.read_text()) if out.exists() else {}, r)
    return results


def _run(shared_runs: dict, flavor: str, request) -> str:
    """The stdout of this test's calls in its flavor's child; their traceback fails the test."""
    done, r = shared_runs[flavor]
    key = _key(request.node)
    assert key in done, f"{key} never finished (exit {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    error, printed = done[key]
    assert error is None, f"{key} failed:\n{error}\n{printed[-2000:]}\n{r.stderr[-2000:]}"
    return printed


@pytest.mark.slow
@pytest.mark.parametrize("flavor", ["keras", "tf_keras"])
def test_keras_origin_cause_kernel_gradient_and_inputs(flavor, shared_runs, request):
    """Acceptance 2 (the custom layer 'attn' and its matmul named; its fp32 code, applied, makes the step
    finite; the what-if predicts it there), 3 (the upstream cause), 5 (a kernel gradient alone overflows:
    the audit skips as a real LossScaleOptimizer does, to the same scale; an underflow that the measured kernel
    gradients show costs nothing is no finding) and 6 (valid token ids, pixels)."""
    if importlib.util.find_spec(flavor) is None:  # not importorskip: it would load TensorFlow in this process
        pytest.skip(f"needs {flavor}")
    out = _run(shared_runs, flavor, request)  # custom_layer, upstream_cause, kernel_gradient, ... (TESTS)
    for what in ("custom layer", "upstream cause", "kernel gradient", "harmless underflow", "fitting batches"):
        assert f"{flavor} {what}: ok" in out, out


@pytest.mark.slow
def test_keras_application_audit_agrees_with_real_loss_scale_optimizer_steps(shared_runs, request):
    """Acceptance 5 on keras.applications.ResNet50 (32x32, batch 8): the skipped steps, the scale it trains
    at and the overflowing kernel as real LossScaleOptimizer steps on the same batch show them; the float16
    softmax head is a finding; EfficientNetB0's built-in preprocessing gets pixels in [0, 255]."""
    out = _run(shared_runs, "keras", request)  # application, application_inputs, after the Keras 3 origin cases
    assert "keras ResNet50: ok" in out and "keras application inputs: ok" in out, out
