"""The Keras audit right on real models (Keras 3 and tf_keras): training=True with matched random
draws, norm-based relative errors checked against an independent computation, advice as code that
works, the loss and shapes read from the model. Bodies in tf_real_cases.py, in fresh interpreters
(one per flavor for the cases of the tests that share one: the MobileNetV2 audits, the Keras audit
cases and the bench of a keras.applications model)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.tensorflow

ROOT = os.path.dirname(os.path.abspath(__file__))
FLAVORS = ["keras", "tf_keras"]


# The selected cases of one flavor share one fresh interpreter, whichever of the tests below they belong to
# (one TensorFlow import instead of one per test and flavor: several seconds apiece on a 2-core CPU); each
# case seeds and sets its own policies, and its verdict is its own (written after each case, so a crash
# names the case it happened in). The bench case runs first in its child, right after the import, as in a
# child of its own.
_SHARED_CHILD = textwrap.dedent('''
    import contextlib, io, json, sys, traceback
    import tf_real_cases
    out, done = sys.argv[1], {}
    for key, call in json.loads(sys.argv[2]).items():
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                getattr(tf_real_cases, call[0])(*call[1:])
            done[key] = [None, printed.getvalue()]
        except BaseException:
            done[key] = [traceback.format_exc(), printed.getvalue()]
        with open(out, "w") as fh:
            json.dump(done, fh)
''')

#: the tests whose cases share the children, in the order their cases run in a child: test -> its call from
#: the test's parameters (a tf_real_cases function and its arguments, the flavor first)
SHARED_TESTS = {
    "test_bench_keras_application_without_shape_flags": lambda p: ["bench_application_without_flags", "keras"],
    "test_keras_audit_case": lambda p: [p["case"], p["flavor"]],
    "test_mobilenet_v2_audit_clean_and_errors_match_an_independent_computation":
        lambda p: ["mobilenet_audit", p["flavor"], p["mode"]],
}


def _key(item) -> str:
    callspec = getattr(item, "callspec", None)
    return f"{item.originalname}[{callspec.id}]" if callspec else item.originalname


@pytest.fixture(scope="module")
def shared_cases(request, tmp_path_factory) -> dict:
    """Runs, one child per flavor, the case of each selected item (all, or those -k chose) of the
    SHARED_TESTS: {flavor: ({item key: [traceback or None, stdout]}, r)}."""
    chosen = {}
    for test, call in SHARED_TESTS.items():
        for item in request.session.items:
            if getattr(item, "module", None) is request.module and item.originalname == test:
                params = item.callspec.params if hasattr(item, "callspec") else {}
                args = call(params)
                chosen.setdefault(args[1], {})[_key(item)] = args
    results = {}
    for flavor, calls in chosen.items():
        out = tmp_path_factory.mktemp(f"tf_real_{flavor}") / "done.json"
        r = subprocess.run([sys.executable, "-c", _SHARED_CHILD, str(out), json.dumps(calls)], cwd=ROOT,
                           capture_output=True, text=True, timeout=900)
        results[flavor] = (json.loads(out.read_text()) if out.exists() else {}, r)
    return results


def _verdict(results: dict, flavor: str, request, call: str) -> str:
    done, r = results[flavor]
    key = _key(request.node)
    assert key in done, f"{call} never finished (exit {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    error, printed = done[key]
    assert error is None, f"{call} failed:\n{error}\n{r.stderr[-2000:]}"
    return printed


@pytest.mark.parametrize("mode", ["bf16", "fp16"])
@pytest.mark.parametrize("flavor", FLAVORS)
def test_mobilenet_v2_audit_clean_and_errors_match_an_independent_computation(flavor, mode, shared_cases, request):
    out = _verdict(shared_cases, flavor, request, f"tf_real_cases.mobilenet_audit({flavor!r}, {mode!r})")
    assert f"{mode} max rel_error" in out


#: each case (a function of tf_real_cases) asserts its own property; the id says which
KERAS_AUDIT_CASES = {
    "dropout_masks_match": "dropout and noise draw the same numbers in both passes",
    "batchnorm_state_as_training_sees_it": "BatchNorm moving statistics updated once per step",
    "fp32_hint_keeps_layer_fp32": "the fp32 hint is code that keeps the layer in float32",
    "planted_cancellation_found": "a planted cancellation shows a large relative error",
    "model_heads": "loss, classes and input shape read from the model",
}


@pytest.mark.parametrize("case", list(KERAS_AUDIT_CASES))
@pytest.mark.parametrize("flavor", FLAVORS)
def test_keras_audit_case(flavor, case, shared_cases, request):
    _verdict(shared_cases, flavor, request, f"tf_real_cases.{case}({flavor!r})")


APPS = textwrap.dedent('''
    def mnv2():
        import keras
        return keras.applications.MobileNetV2(input_shape=(32, 32, 3), weights=None, classes=10, alpha=0.35)
''')


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "ampkit", *args], capture_output=True, text=True, timeout=600,
                          cwd=cwd)


def test_bench_keras_application_without_shape_flags(shared_cases, request):
    """bench (its probe and a mode's run, as the CLI's processes call them) of
    keras.applications.MobileNetV2(input_shape=(32,32,3), classes=10) needs no --input-shape or
    --num-classes, and trains on its softmax outputs as probabilities (first in the Keras 3 cases' child)."""
    _verdict(shared_cases, "keras", request, "tf_real_cases.bench_application_without_flags('keras')")


def test_cli_audit_keras_application_and_flags_contradicting_it(tmp_path):
    """audit reads the shapes from the model too; a flag contradicting the model is one line, exit 2."""
    (tmp_path / "apps.py").write_text(APPS)
    r = _cli("audit", "--framework", "tensorflow", "--model", "apps:mnv2", "--mode", "bf16", "--batch-size", "4",
             "--json", "-", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert len(doc["layers"]) == 155 and doc["first_nonfinite"] is None
    assert not [f for f in doc["findings"] if f["kind"] in ("overflow", "underflow", "nonfinite")], doc["findings"][:3]
    # (--num-classes 5 and other contradictions: model_heads, on the function the CLI calls)
    r = _cli("audit", "--framework", "tensorflow", "--model", "apps:mnv2", "--input-shape", "28,28,1", cwd=tmp_path)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("ampkit: error:")]
    assert r.returncode == 2 and len(lines) == 1 and "--input-shape 28,28,1 contradicts" in lines[0], r.stderr[-2000:]
    assert "Traceback" not in r.stderr
