"""ampkit.keras.MixedPrecision.callback() in model.fit: the pre-failure ring buffer and the
first-failure document (issue #26 item 4), Keras 3 and tf_keras on TensorFlow.

One child process (keras_watch_cases.py: TensorFlow stays out of this process) fits a small
model three times: Keras 3 fp16 with a layer planted to overflow from batch 5 on, Keras 3 bf16
clean, tf_keras fp16 planted. The loss scale is read after every batch by a separate callback:
the optimizer's own history the ledger must equal.
"""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from helpers import keras_child

pytestmark = [pytest.mark.tensorflow,
              pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")]

HERE = os.path.dirname(os.path.abspath(__file__))
PLANT_FROM = 5


@pytest.fixture(scope="module")
def fits(tmp_path_factory):
    out = tmp_path_factory.mktemp("keras_watch")
    return keras_child(os.path.join(HERE, "keras_watch_cases.py"), out), out


@pytest.mark.parametrize("case,name", [("keras_fp16", "sequential/planted"), ("tf_keras_fp16", "planted")])
def test_planted_overflow_named_and_documented(fits, case, name):
    res, out = fits
    if case not in res:
        pytest.skip("tf_keras is not installed")
    r = res[case]
    # x * 1e6 in the planted layer's own call, 1e6 cast to float16 first (inf: the op that makes it), found by
    # calling the layer again on the failing batch's inputs (issue #46); float32 casts it finitely
    assert r["summary"]["first_nonfinite"] == {"name": name, "phase": "forward", "step": PLANT_FROM,
                                                  "op": "Cast", "in_reference": False, "traced": "failing step"}
    doc = json.loads((out / f"{case}.json").read_text())
    assert doc["command"] == "audit" and doc["framework"] == "tensorflow" and doc["mode"] == "fp16"
    ring = doc["ring_buffer"]
    assert ring["steps"] == [1, 2, 3, 4, 5]
    assert ring["fwd_amax"][name][-1] in ("nan", "inf") and all(isinstance(v, float) for v in ring["fwd_amax"][name][:-1])
    assert doc["summary"]["steps"] == 10


@pytest.mark.parametrize("case", ["keras_fp16", "tf_keras_fp16"])
def test_ledger_equals_the_optimizers_own_scale_history(fits, case):
    res, _ = fits
    if case not in res:
        pytest.skip("tf_keras is not installed")
    r = res[case]
    own = r["own"]
    assert r["ledger"]["scales"] == own
    # a step is skipped exactly when the scale went down (from the initial 2**15)
    prev = [2.0**15] + own[:-1]
    assert r["ledger"]["skipped_steps"] == [i + 1 for i, (a, b) in enumerate(zip(prev, own)) if b < a]
    assert r["ledger"]["skipped_steps"][0] == PLANT_FROM


def test_clean_bf16_fit_has_no_findings_and_no_warnings(fits):
    res, out = fits
    r = res["keras_bf16"]
    assert r["lines"] == [] and r["warnings"] == []
    doc = json.loads((out / "keras_bf16.json").read_text())
    assert doc["findings"] == [] and doc["first_nonfinite"] is None and doc["mode"] == "bf16"
    assert all(lay["fwd_nonfinite"] == 0 and lay["fwd_amax"] is not None for lay in doc["layers"])


def test_report_renders_the_keras_documents(fits, tmp_path):
    from ampkit.cli.main import main

    _, out = fits
    md = tmp_path / "r.md"
    assert main(["report", *sorted(str(p) for p in out.glob("*.json")), "--markdown", str(md)]) in (0, None)
    assert "first inf/NaN in `sequential/planted` (forward)" in md.read_text()
