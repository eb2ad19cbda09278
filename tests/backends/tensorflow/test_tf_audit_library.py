"""One library surface (#38): ``ampkit.audit(build_model, (x, y), loss_fn, framework=...)`` audits a
Keras model through the neutral driver and returns the same AuditReport as for PyTorch; ``auto``
picks the model's framework (TensorFlow for a Keras builder, even with torch installed). The Keras
part runs in a fresh interpreter (one TensorFlow import, never in this process)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

CHILD = r"""
import json
import keras
import numpy as np

import ampkit
import ampkit.audit.driver as driver
from ampkit.audit.report import AuditReport
from ampkit.errors import UsageError

calls = []
real = driver.audit_here
driver.audit_here = lambda config, backend, live=None, progress=None: (calls.append(backend.name),
                                                                        real(config, backend, live, progress))[1]

def build():
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(5, name="hidden"),
                             keras.layers.Dense(3, name="head")])

x = np.random.default_rng(0).normal(size=(8, 4)).astype("float32")
y = np.arange(8) % 3
loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
out = {}
for framework in ("auto", "tensorflow", "keras"):
    rep = ampkit.audit(build, (x, y), loss, mode="bf16", framework=framework, lr=0.0, name="tiny")
    assert type(rep) is AuditReport, type(rep)
    doc = rep.to_dict()
    out[framework] = {"framework": doc["framework"], "env": doc["environment"]["framework"], "mode": doc["mode"],
                      "workload": doc["workload"], "layers": [lay.name for lay in rep.layers],
                      "amax": rep.layers[0].fwd_amax, "err": rep.layers[0].rel_error}
# the float32 reference's first layer, as the audit built it (seed 0): its output amax exactly
keras.utils.set_random_seed(0)
ref = build()
w, b = ref.layers[0].get_weights()
out["expected_amax"] = float(np.abs(x @ w + b).max())
out["calls"] = calls
try:
    ampkit.audit(build, (x, y), framework="tensorflow")
except UsageError as exc:
    out["no_loss"] = str(exc)
try:
    ampkit.audit(build(), (x, y), loss)  # a built model: one policy only
except UsageError as exc:
    out["built"] = str(exc)
print("RESULT" + json.dumps(out))
"""


@pytest.mark.tensorflow
def test_library_audit_runs_a_keras_model_through_the_driver():
    if not all(importlib.util.find_spec(m) for m in ("tensorflow", "keras")):  # not importorskip: no TensorFlow here
        pytest.skip("needs tensorflow and keras")
    r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.split("RESULT", 1)[1])
    # auto, tensorflow and keras all ran the neutral driver on TensorFlow (and so did the refused calls, below)
    assert out["calls"] == ["tensorflow"] * 5
    for framework in ("auto", "tensorflow", "keras"):
        got = out[framework]
        assert got["framework"] == got["env"] == "tensorflow" and got["mode"] == "bf16", got
        assert got["layers"] == ["hidden", "head"] and got["workload"] == "tiny", got
        assert got["amax"] == pytest.approx(out["expected_amax"], rel=1e-6), got
        assert 0 < got["err"] < 0.02, got  # bf16 against float32: rounding, not garbage
    assert "loss_fn(y_true, y_pred)" in out["no_loss"] and "\n" not in out["no_loss"]
    assert "pass a zero-argument function that builds it" in out["built"] and "received a built Sequential" in out["built"]
