"""Keras fit runs compared (#48 point 3): fp32 and bf16 (two seeds each) with mp.callback(seed=...)
-> the documents carry the run and `ampkit parity --runs` gives parity's verdict keys. The fits run
in a child interpreter (TensorFlow stays out of this process); the comparison reads JSON only."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.tensorflow,
              pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")]

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src")

FITS = textwrap.dedent('''
    import sys

    import keras
    import numpy as np

    import ampkit.keras as ak

    out = sys.argv[1]
    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 8)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")
    for mode in ("fp32", "bf16"):
        for seed in (0, 1):
            keras.utils.set_random_seed(seed)
            mp = ak.MixedPrecision(mode)
            with mp.scope():
                inputs = keras.Input((8,))
                h = keras.layers.Dense(16, activation="relu")(inputs)
                model = keras.Model(inputs, ak.float32_output(keras.layers.Dense(2)(h)))
                model.compile(optimizer=mp.optimizer(keras.optimizers.SGD(0.3)), metrics=["accuracy"],
                              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            model.fit(x, y, batch_size=16, epochs=1, validation_data=(x, y), verbose=0,
                      callbacks=[mp.callback(model, json_path=f"{out}/{mode}-{seed}.json", seed=seed)])
    print("DONE")
''')


def test_keras_fit_runs_carry_the_run_and_compare(tmp_path):
    (tmp_path / "fits.py").write_text(FITS)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow", "PYTHONPATH": SRC,
           "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([sys.executable, str(tmp_path / "fits.py"), str(tmp_path)], capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0 and "DONE" in r.stdout, r.stderr[-4000:]
    run = json.loads((tmp_path / "bf16-1.json").read_text())["run"]
    assert run["mode"] == "bf16" and run["seed"] == 1 and run["steps"] == 6 and run["framework"] == "tensorflow"
    assert run["loss_steps"] == [1, 2, 3, 4, 5, 6] and len(run["step_s"]) == 6
    assert "val_accuracy" in run["eval"][-1] and run["model"].startswith("Functional (")
    out = tmp_path / "p.json"
    r = subprocess.run([sys.executable, "-m", "ampkit", "parity", "--runs",
                        *(str(tmp_path / f"{m}-{s}.json") for m in ("fp32", "bf16") for s in (0, 1)),
                        "--tolerance", "0.5", "--json", str(out)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(out.read_text())
    assert doc["metric"] == "val_accuracy" and [x["mode"] for x in doc["results"]] == ["fp32", "bf16"]
    assert doc["results"][1]["seeds"] == [0, 1] and doc["results"][1]["verdict"] in ("pass", "fail", "inconclusive")
