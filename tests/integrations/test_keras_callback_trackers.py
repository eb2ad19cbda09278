"""``ampkit.keras.MixedPrecision.callback()`` as a tracker source and on Keras's other backends.

Child processes (keras_trackers_cases.py; TensorFlow and JAX stay out of this process) fit a Keras
3 fp16 model whose layer ``d1`` overflows on the 5th training batch only (2 epochs of 5 batches):

* on TensorFlow, ``CSVLogger`` and ``TensorBoard`` listed after the ampkit callback receive the
  ``amp/`` values of each epoch (the TensorBoard event file is read back);
* with ``KERAS_BACKEND=jax`` the layer statistics cannot be had: the document still records the
  10 steps, the skip at step 5 and the first non-finite loss, says ``framework: "jax"`` and what it
  cannot see, and one visible line says so.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.tensorflow,
              pytest.mark.skipif(importlib.util.find_spec("keras") is None, reason="needs Keras 3")]

HERE = os.path.dirname(os.path.abspath(__file__))


def _fit(tmp, backend) -> dict:
    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"needs {backend}")
    r = subprocess.run([sys.executable, os.path.join(HERE, "keras_trackers_cases.py"), str(tmp)], cwd=HERE,
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": backend})
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert r.returncode == 0 and line, r.stdout[-2000:] + r.stderr[-4000:]
    res = json.loads(line[0][len("RESULT "):])
    assert res["backend"] == backend
    return res


def _csv(tmp) -> list[dict]:
    with open(tmp / "log.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def _amp_epochs(rows) -> list:
    return [(float(r["amp/loss_scale"]), float(r["amp/skipped_steps"]), float(r["amp/skipped_in_window"]),
             r["amp/first_nonfinite"]) for r in rows]


def test_tensorflow_csvlogger_and_tensorboard_receive_amp_values(tmp_path):
    res = _fit(tmp_path, "tensorflow")
    assert _amp_epochs(_csv(tmp_path)) == [(16384.0, 1.0, 1.0, "5.0"), (16384.0, 1.0, 0.0, "NA")]
    if res["tb"] is None:
        pytest.skip("tensorboard is not installed")
    assert res["tb"]["epoch_amp/loss_scale"] == [16384.0, 16384.0]
    assert res["tb"]["epoch_amp/skipped_steps"] == [1.0, 1.0]
    assert res["tb"]["epoch_amp/skipped_in_window"] == [1.0, 0.0]
    assert res["tb"]["epoch_amp/first_nonfinite"] == [5.0]
    doc = json.loads((tmp_path / "run.json").read_text())
    first = doc["first_nonfinite"]  # and the origin's "op"/"in_reference" (#34)
    assert {k: first.get(k) for k in ("name", "phase", "step")} == \
        {"name": "sequential/d1", "phase": "forward", "step": 5}
    assert doc["ledger"]["skipped_steps"] == doc["summary"]["skipped_steps"] == [5] and "not_watched" not in doc


def test_jax_backend_records_what_ran_and_says_what_it_cannot_see(tmp_path):
    res = _fit(tmp_path, "jax")
    assert res["skipped"].index(True) == 4 and sum(res["skipped"]) == 1     # the optimizer's own: batch 5
    doc = json.loads((tmp_path / "run.json").read_text())
    assert doc["framework"] == "jax" and doc["keras_backend"] == "jax"
    assert doc["steps"] == 10 and doc["ledger"]["skipped_steps"] == doc["summary"]["skipped_steps"] == [5]
    assert doc["summary"]["scale_final"] == 16384.0 and doc["summary"]["initial_scale"] == 32768.0
    first = doc["first_nonfinite"]  # and the origin's "op"/"in_reference" (#34)
    assert {k: first.get(k) for k in ("name", "phase", "step")} == \
        {"name": "(loss)", "phase": "loss", "step": 5}
    assert doc["not_watched"] == ["layer outputs", "layer gradients"]
    assert "10 steps in fp16, 1 skipped [5]" in doc["note"] and "first inf/NaN: the loss at step 5" in doc["note"]
    said = [ln for ln in res["lines"] if "not each layer's output or gradient" in ln]
    assert len(said) == 1 and "jax backend" in said[0]
    assert _amp_epochs(_csv(tmp_path)) == [(16384.0, 1.0, 1.0, "5.0"), (16384.0, 1.0, 0.0, "NA")]
