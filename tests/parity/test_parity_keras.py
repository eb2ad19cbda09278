"""ampkit parity --framework tensorflow on a user's Keras model and data (arrays, tf.data), in child
processes: TensorFlow never loads in the test process. Marked `tensorflow`."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.tensorflow,
              pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed")]

HERE = os.path.dirname(os.path.abspath(__file__))


#: one child process runs every case (one TensorFlow import): ampkit's main() per case, its stderr captured
CHILD = r"""
import contextlib, io, json, sys
from ampkit.cli.main import main
results = []
for args in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(["parity", "--framework", "tensorflow", "--device", "cpu", *args])
    results.append({"rc": rc, "stderr": err.getvalue()})
if len(sys.argv) > 2:  # the library on tf.data pipelines given directly (issue #49), as the CLI's --data
    import ampkit, parity_keras_factories as f
    rep = ampkit.parity(f.mlp, *f.ordered_datasets(), modes="fp32,bf16", seeds=1, epochs=1, framework="tensorflow",
                        device="cpu", progress=False)
    with open(sys.argv[2], "w") as out:
        out.write(rep.to_json())
print("RESULTS=" + json.dumps(results))
"""

BAD = [
    ("not_a_model", "arrays", "parity_keras_factories:not_a_model() returned a object; expected a keras.Model"),
    ("mlp", "wrong_features", "a train batch of parity_keras_factories:wrong_features does not fit"),
    ("mlp", "empty", "parity_keras_factories:empty: the train data set is empty"),
    ("mlp", "endless", "the train tf.data.Dataset repeats forever (.repeat() without a count): an endless stream has "
                       "no epochs; give --steps N"),
    ("mlp", "unbatched", "its elements look unbatched (rank 1, the model takes rank 2): call .batch(N) on the dataset"),
]


def test_keras_model_and_data_factories(tmp_path):
    """Acceptance 1 (Keras): a functional model on (inputs, targets) arrays, 2 seeds; the same data
    as tf.data pipelines (a training shuffle without a seed, rebuilt per run so every mode of a seed
    sees the same order: fp32 and bf16 start from the same loss). Acceptance 4 (Keras): a factory
    that returns no model, data that does not fit the model, an empty data set: one line, exit 2."""
    # two seeds on arrays; one on the others (each a check of its own: tf.data, the library's match, chance)
    cases = [["--model", "parity_keras_factories:mlp", "--data", f"parity_keras_factories:{data}", "--modes",
              "fp32,bf16", "--seeds", "2" if data == "arrays" else "1", "--epochs", "1",
              "--json", str(tmp_path / f"{data}.json")]
             for data in ("arrays", "datasets", "ordered_datasets", "noise")]
    cases += [["--model", f"parity_keras_factories:{m}", "--data", f"parity_keras_factories:{d}", "--seeds", "2"]
              for m, d, _ in BAD]
    library = tmp_path / "library.json"
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cases), str(library)], capture_output=True, text=True,
                       timeout=600, cwd=HERE)
    assert r.returncode == 0 and "RESULTS=" in r.stdout, r.stderr[-3000:]
    results = json.loads(r.stdout.split("RESULTS=", 1)[1])
    extra, results = results[2:4], results[:2] + results[4:]
    # issue #49: ampkit.parity(make_model, tf.data, tf.data) trains as --data does, loss for loss
    lib, cli = json.loads(library.read_text()), json.loads((tmp_path / "ordered_datasets.json").read_text())
    assert extra[0]["rc"] in (0, 1) and lib["framework"] == "tensorflow" and lib["metric"] == "accuracy"
    assert [(run["mode"], run["seed"], run["train_loss"], run["test_accuracy"]) for p in lib["results"] for run in p["runs"]] \
        == [(run["mode"], run["seed"], run["train_loss"], run["test_accuracy"]) for p in cli["results"] for run in p["runs"]]
    # issue #46: nothing to learn -> every mode inconclusive, the reason naming the fp32 baseline at chance
    noise = json.loads((tmp_path / "noise.json").read_text())
    assert extra[1]["rc"] == 1 and noise["baseline_not_learned"].startswith("the fp32 baseline did not learn")
    assert noise["results"][1]["verdict"] == "inconclusive" and "at chance" in noise["results"][1]["reason"]
    assert "inconclusive: the fp32 baseline did not learn" in r.stdout  # the table's first line (--json PATH)
    assert all(run["first_loss"] is not None for p in noise["results"] for run in p["runs"])
    for data, res in zip(("arrays", "datasets"), results):
        assert res["rc"] in (0, 1) and "Traceback" not in res["stderr"], res["stderr"][-3000:]
        doc = json.loads((tmp_path / f"{data}.json").read_text())
        rows = {p["mode"]: p for p in doc["results"]}
        assert doc["framework"] == "tensorflow" and doc["metric"] == "accuracy" and list(rows) == ["fp32", "bf16"]
        bf16 = rows["bf16"]
        assert bf16["equivalence"]["verdict"] in ("equivalent", "not_equivalent", "inconclusive")
        assert res["rc"] == (0 if bf16["verdict"] == "pass" else 1)
        for a, b in zip(rows["fp32"]["runs"], bf16["runs"]):  # same weights, same order: bf16 stays close
            assert a["seed"] == b["seed"] and abs(a["train_loss"][0] - b["train_loss"][0]) < 0.05
    for (_, _, needle), res in zip(BAD, results[2:]):
        lines = [ln for ln in res["stderr"].splitlines() if ln.startswith("ampkit:")]
        assert res["rc"] == 2 and len(lines) == 1 and needle in lines[0], res["stderr"][-2000:]
