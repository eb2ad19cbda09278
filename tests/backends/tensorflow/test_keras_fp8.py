"""``ampkit.keras.MixedPrecision("fp8")``: Keras 3's float8 training (``model.quantize("float8")``),
issue #28 item 7. Marked ``tensorflow``; TensorFlow loads only in ONE child (keras_fp8_cases.py).

Ported from Keras's own tests (keras/src/layers/core/dense_test.py ``test_quantize_float8*`` and
``test_quantize_float8_fitting``): the quantized layers' mode and ``float8_from_mixed_bfloat16``
policy, fit runs with falling loss, the input scale moves off its initial 1.0. Beyond them: the
engine's conversion gives exactly Keras used by hand (same policy, same ``filters``): identical
losses and variables after four fit steps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.tensorflow

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def cases() -> dict:
    r = subprocess.run([sys.executable, os.path.join(HERE, "keras_fp8_cases.py")], capture_output=True, text=True,
                       timeout=600, cwd=HERE)
    assert r.returncode == 0, f"{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return {d["case"]: d for d in (json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith('{"case"'))}


def test_fp8_converts_the_middle_layers_keeps_first_and_last_and_trains(cases):
    e = cases["engine"]
    assert e["mode"] == "fp8" and e["emulated"] is True and e["policy"] == "mixed_bfloat16"
    assert "without fp8 speed" in e["reason"]
    by_name = {d["name"]: d for d in e["fp8_layers"]}
    assert [d["name"] for d in e["fp8_layers"]] == ["first", "mid100", "ein30", "logits"]
    assert by_name["mid100"] == {"name": "mid100", "type": "Dense", "shape": [64, 100], "converted": True,
                                 "reason": None}
    assert by_name["ein30"]["converted"] is True and by_name["ein30"]["shape"] == [100, 30]  # no multiple-of-16 rule
    assert by_name["first"]["reason"].startswith("first Dense of the model: kept in bfloat16")
    assert by_name["logits"]["reason"].startswith("last Dense of the model: kept in float32")
    assert e["layers"]["mid100"] == ["float8", "float8_from_mixed_bfloat16"]
    assert e["layers"]["first"] == [None, "mixed_bfloat16"] and e["layers"]["logits"] == [None, "float32"]
    losses = e["losses"]
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    assert e["scale"] != 1.0 and e["var_dtypes"] == ["float32"] and e["verify"] == []


def test_engine_equals_keras_quantize_by_hand(cases):
    assert cases["by_hand"]["losses"] == cases["engine"]["losses"]
    assert cases["by_hand"]["same_weights"] is True


def test_skip_first_last_off_and_filter(cases):
    conv = {d["name"]: (d["converted"], d["reason"]) for d in cases["all"]["fp8_layers"]}
    assert conv == {"first": (True, None), "mid100": (True, None), "ein30": (False, "left out by fp8_filter"),
                    "logits": (False, "given dtype float32 explicitly: kept in float32")}


def test_refusals_are_one_line(cases):
    err = cases["errors"]["errors"]
    assert err["unbuilt"][0] == "UsageError" and "needs a built model" in err["unbuilt"][1]
    assert err["filter_not_fp8"][0] == "UsageError" and "received mode 'bf16'" in err["filter_not_fp8"][1]
    assert err["after_fit"][0] == "UsageError" and "before the optimizer is built" in err["after_fit"][1]
    assert err["tf_keras"] == ["ModeUnavailableError", "mode 'fp8' cannot run here: fp8 needs Keras 3's "
                               "model.quantize('float8'); tf_keras (Keras 2) has no float8 training"]
    assert all("\n" not in v[1] for v in err.values())
    assert cases["errors"]["bf16_same"] is True and cases["errors"]["bf16_layers"] == []
    assert cases["errors"]["bf16_emulated"] is False


def test_support_hardware_answer_vs_training_answer(cases):
    s = cases["support"]
    assert s["backend"][:2] == [True, True]
    assert s["hardware"][0] is False and "no GPU" in s["hardware"][1]
    assert s["tf_keras"][:2] == [False, False] and s["jax"][:2] == [False, False]
    assert "TensorFlow backend only" in s["jax"][2]


def test_doctor_fp8_selftest_runs_a_real_float8_step(cases):
    status, detail = cases["selftest"]["result"]
    assert status == "pass", detail
    assert "middle Dense as Keras float8" in detail and "emulated" in detail


def test_a_model_with_nothing_to_convert_says_so(cases):
    c = cases["none_converted"]
    assert c["fp8_layers"] == [{"name": "only", "type": "Dense", "shape": [8, 4], "converted": False,
                                "reason": "only Dense of the model: kept in float32 (fp8_skip_first_last=False "
                                          "converts it)"}]
    assert any("no layer became Keras float8" in w for w in c["warnings"]), c["warnings"]
