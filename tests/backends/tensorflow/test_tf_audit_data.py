"""``ampkit audit --framework tensorflow`` on a functional model wrapping a keras.applications model
(issue #50 point 6), with and without ``--data``; ``--data`` for Keras audits, the input shape taken
from the data, an ``--input-shape`` that contradicts it one line (issue #46 point 4). Factories and
the library cases in tf_data_cases.py (the library cases share one child: one TensorFlow import)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.tensorflow

HERE = os.path.dirname(os.path.abspath(__file__))


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "ampkit", "audit", "--framework", "tensorflow", *args],
                          capture_output=True, text=True, timeout=600, cwd=HERE)


def test_library_data_arrays_dataset_train_val_regression_refusals_and_nested_in_both_kerases():
    r = subprocess.run([sys.executable, os.path.join(HERE, "tf_data_cases.py"), "data_cases"], capture_output=True,
                       text=True, timeout=600, cwd=HERE)
    assert r.returncode == 0, f"{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    for case in ("arrays", "dataset", "train_val", "regression", "refusals", "nested"):
        assert f"{case} ok" in r.stdout, r.stdout


@pytest.mark.parametrize("data", [None, "tf_data_cases:images"])
def test_cli_audit_of_an_application_nested_as_a_layer(data):
    extra = ["--data", data] if data else []
    r = _cli("--model", "tf_data_cases:transfer", "--mode", "bf16", "--batch-size", "4", "--json", "-", *extra)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    rows = {lay["name"]: lay for lay in doc["layers"]}
    nested = [lay for lay in doc["layers"] if lay["type"] == "Functional"]
    assert len(nested) == 1 and nested[0]["name"].startswith("mobilenetv2"), list(rows)
    assert set(rows) - {nested[0]["name"]} == {"pool", "logits"}, list(rows)
    # measured, forward and backward: the backbone's output and the gradient w.r.t. it
    assert nested[0]["fwd_amax"] > 0 and nested[0]["grad_amax"] > 0 and doc["first_nonfinite"] is None, nested[0]
    if data:
        assert doc["input"]["kind"] == "data" and doc["input"]["from"] == data and doc["input"]["shape"] == [4, 32, 32, 3]
        assert doc["input"]["max"] > 4  # the user's values (2 x N(0,1)), not the workload's N(0,1)
    else:
        assert doc["input"]["kind"] != "data"


def test_cli_keras_data_without_input_shape_and_a_contradicting_one():
    r = _cli("--model", "tf_data_cases:bare", "--data", "tf_data_cases:wide", "--mode", "bf16", "--json", "-")
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout)["input"]["shape"] == [24, 64]
    r = _cli("--model", "tf_data_cases:bare", "--data", "tf_data_cases:wide", "--input-shape", "3")
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("ampkit: error:")]  # (TensorFlow's log lines besides)
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "--input-shape 3 contradicts the data tf_data_cases:wide, whose inputs are 64 per sample" in lines[0], lines
