"""The Keras audit right on real models (Keras 3 and tf_keras): training=True with matched random
draws, norm-based relative errors checked against an independent computation, advice as code that
works, the loss and shapes read from the model. Bodies in tf_real_cases.py, in fresh interpreters
(one per test and flavor for the cases that share one)."""

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


def _case(name: str, *args: str) -> str:
    call = f"tf_real_cases.{name}({', '.join(map(repr, args))})"
    r = subprocess.run([sys.executable, "-c", f"import tf_real_cases; {call}"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{call} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return r.stdout


# The selected cases of one flavor share one fresh interpreter (one TensorFlow import instead of one per
# case: several seconds apiece on a 2-core CPU); each case seeds and sets its own policies, and its verdict
# is its own (written after each case, so a crash names the case it happened in).
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


def _shared(request, tmp_path_factory, test: str, call) -> dict:
    """Runs, one child per flavor, ``call(params)`` (a tf_real_cases function and its arguments) for each
    selected case of ``test`` (all, or those -k chose): {flavor: ({case id: [traceback or None, stdout]}, r)}."""
    chosen = {}
    for item in request.session.items:
        if getattr(item, "module", None) is request.module and item.originalname == test:
            params = item.callspec.params
            chosen.setdefault(params["flavor"], {})[item.callspec.id] = call(params)
    results = {}
    for flavor, calls in chosen.items():
        out = tmp_path_factory.mktemp(f"tf_real_{flavor}") / "done.json"
        r = subprocess.run([sys.executable, "-c", _SHARED_CHILD, str(out), json.dumps(calls)], cwd=ROOT,
                           capture_output=True, text=True, timeout=900)
        results[flavor] = (json.loads(out.read_text()) if out.exists() else {}, r)
    return results


def _verdict(results: dict, flavor: str, key: str, call: str) -> str:
    done, r = results[flavor]
    assert key in done, f"{call} never finished (exit {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    error, printed = done[key]
    assert error is None, f"{call} failed:\n{error}\n{r.stderr[-2000:]}"
    return printed


@pytest.fixture(scope="module")
def mobilenet_audits(request, tmp_path_factory):
    return _shared(request, tmp_path_factory, "test_mobilenet_v2_audit_clean_and_errors_match_an_independent_computation",
                   lambda p: ["mobilenet_audit", p["flavor"], p["mode"]])


@pytest.mark.parametrize("mode", ["bf16", "fp16"])
@pytest.mark.parametrize("flavor", FLAVORS)
def test_mobilenet_v2_audit_clean_and_errors_match_an_independent_computation(flavor, mode, mobilenet_audits,
                                                                              request):
    out = _verdict(mobilenet_audits, flavor, request.node.callspec.id,
                   f"tf_real_cases.mobilenet_audit({flavor!r}, {mode!r})")
    assert f"{mode} max rel_error" in out


#: each case (a function of tf_real_cases) asserts its own property; the id says which
KERAS_AUDIT_CASES = {
    "dropout_masks_match": "dropout and noise draw the same numbers in both passes",
    "batchnorm_state_as_training_sees_it": "BatchNorm moving statistics updated once per step",
    "fp32_hint_keeps_layer_fp32": "the fp32 hint is code that keeps the layer in float32",
    "planted_cancellation_found": "a planted cancellation shows a large relative error",
    "model_heads": "loss, classes and input shape read from the model",
}


@pytest.fixture(scope="module")
def audit_cases(request, tmp_path_factory):
    return _shared(request, tmp_path_factory, "test_keras_audit_case", lambda p: [p["case"], p["flavor"]])


@pytest.mark.parametrize("case", list(KERAS_AUDIT_CASES))
@pytest.mark.parametrize("flavor", FLAVORS)
def test_keras_audit_case(flavor, case, audit_cases, request):
    _verdict(audit_cases, flavor, request.node.callspec.id, f"tf_real_cases.{case}({flavor!r})")


APPS = textwrap.dedent('''
    def mnv2():
        import keras
        return keras.applications.MobileNetV2(input_shape=(32, 32, 3), weights=None, classes=10, alpha=0.35)
''')


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "ampkit", *args], capture_output=True, text=True, timeout=600,
                          cwd=cwd)


def test_bench_keras_application_without_shape_flags():
    """bench (its probe and a mode's run, as the CLI's processes call them) of
    keras.applications.MobileNetV2(input_shape=(32,32,3), classes=10) needs no --input-shape or
    --num-classes, and trains on its softmax outputs as probabilities."""
    _case("bench_application_without_flags", "keras")


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
