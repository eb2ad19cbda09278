"""The Keras audit right on real models (Keras 3 and tf_keras): training=True with matched random
draws, norm-based relative errors checked against an independent computation, advice as code that
works, the loss and shapes read from the model. Bodies in tf_real_cases.py, in fresh interpreters
(one per flavor for the cases of the tests that share one: the MobileNetV2 audits, the Keras audit
cases and the bench of a keras.applications model)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from shared_child import run_selected, verdict

pytestmark = pytest.mark.tensorflow

FLAVORS = ["keras", "tf_keras"]


#: the tests whose cases share one child per flavor (shared_child.py), in the order their cases run in it:
#: test -> (its flavor, its call of tf_real_cases) from the test's parameters. The bench case runs first in its
#: child, right after the import, as in a child of its own.
SHARED_TESTS = {
    "test_bench_keras_application_without_shape_flags": lambda p: ("keras", [["bench_application_without_flags", "keras"]]),
    "test_keras_audit_case": lambda p: (p["flavor"], [[p["case"], p["flavor"]]]),
    "test_mobilenet_v2_audit_clean_and_errors_match_an_independent_computation":
        lambda p: (p["flavor"], [["mobilenet_audit", p["flavor"], p["mode"]]]),
}


@pytest.fixture(scope="module")
def shared_cases(request, tmp_path_factory) -> dict:
    return run_selected(request, tmp_path_factory, "tf_real_cases", SHARED_TESTS)


@pytest.mark.parametrize("mode", ["bf16", "fp16"])
@pytest.mark.parametrize("flavor", FLAVORS)
def test_mobilenet_v2_audit_clean_and_errors_match_an_independent_computation(flavor, mode, shared_cases, request):
    out = verdict(shared_cases, flavor, request)
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
    verdict(shared_cases, flavor, request)


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
    verdict(shared_cases, "keras", request)


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
