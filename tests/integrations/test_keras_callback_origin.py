"""ampkit.keras's ``fit`` callback names the custom layer whose own code made the first inf/NaN and the op, on
the step it happened (issue #46): a custom attention whose ``q @ k^T`` overflows fp16 on batches 5 and 6 only,
or on every batch; the layer is called again on the failing batch's own inputs (kept only for a failing call).
One skip ledger, equal to the optimizer's own scale history. Keras 3 on TensorFlow, in a child process
(keras_origin_cases.py)."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from helpers import keras_child

pytestmark = [pytest.mark.tensorflow,
              pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")]

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def fits(tmp_path_factory):
    out = tmp_path_factory.mktemp("keras_origin")
    return keras_child(os.path.join(HERE, "keras_origin_cases.py"), out), out


@pytest.mark.parametrize("case, model, step, skips", [("two", "sequential", 5, [5, 6]),
                                                      ("all", "sequential_1", 1, list(range(1, 9)))])
def test_the_attention_and_its_matmul_on_the_failing_step(fits, case, model, step, skips):
    res, out = fits
    r = res[case]
    assert r["summary"]["first_nonfinite"] == {"name": f"{model}/attn", "phase": "forward", "step": step,
                                               "op": "BatchMatMulV2", "in_reference": False, "traced": "failing step",
                                               "received_by": f"{model}/attn/o"}
    finding = r["findings"][0]
    assert finding["layer"] == f"{model}/attn" and f"Keep {model}/attn in float32" in finding["advice"]
    assert r["ledger"]["scales"] == r["own"] and r["ledger"]["skipped_steps"] == skips == r["summary"]["skipped_steps"]
    doc = json.loads((out / f"{case}.json").read_text())
    assert doc["first_nonfinite"] == r["summary"]["first_nonfinite"] and doc["ledger"]["skipped_steps"] == skips


def test_a_clean_fit_keeps_nothing_and_finds_nothing(fits):
    r = fits[0]["clean"]
    assert r["summary"]["first_nonfinite"] is None and r["findings"] == [] and r["ledger"]["skipped_steps"] == []


def test_ampkit_report_names_the_layer(fits, tmp_path):
    from ampkit.cli.main import main

    _, out = fits
    md = tmp_path / "r.md"
    assert main(["report", str(out / "two.json"), "--markdown", str(md)]) in (0, None)
    text = md.read_text()
    assert "sequential/attn" in text and "made by BatchMatMulV2" in text
