"""One library surface (issue #38): ``ampkit.parity``, ``ampkit.bench`` and ``ampkit.doctor`` take
``framework="auto"`` -- the model's framework -- and run a Keras model too; each command has a frozen
config and goes through its driver; ``ParityData`` holds one data shape, built with keywords."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn

import ampkit
from ampkit.errors import UsageError
from ampkit.parity.ops import Arrays, DataSets, ParityData
from ampkit.registry import framework_of, made_by

HERE = os.path.dirname(os.path.abspath(__file__))
X, Y = torch.randn(16, 4, generator=torch.Generator().manual_seed(0)), torch.arange(16) % 3


def _fake(module: str, name: str = "Model", base=object):
    """A class that lives in ``module`` as far as its MRO says (no framework imported)."""
    return type(name, (base,), {"__module__": module})


# ---------------------------------------------------------------- the framework of a model or its data
def test_framework_of_reads_the_packages_of_the_classes():
    keras_model = _fake("keras.src.models.functional")
    user_subclass = _fake("my_models", "Net", keras_model)  # a user's subclass: found through its MRO
    hf_tf = _fake("transformers.models.bert.modeling_tf_bert", "TFBert", _fake("tf_keras.src.engine.training"))
    assert framework_of(nn.Linear(2, 2)) == "torch"
    assert framework_of(torch.utils.data.TensorDataset(X, Y)) == "torch"
    assert framework_of((X, Y)) == "torch" and framework_of(((X, Y), (X, Y))) == "torch"
    assert framework_of(ampkit.Workload(model=nn.Linear(4, 3), make_batch=lambda n, d: (X, Y))) == "torch"
    assert framework_of(user_subclass()) == "tensorflow" and framework_of(hf_tf()) == "tensorflow"
    assert framework_of(_fake("tensorflow.python.data.ops.dataset_ops", "DatasetV2")()) == "tensorflow"
    assert framework_of(np.zeros(3), (np.zeros(3), np.zeros(3)), None, 5, "torch") is None  # nothing tells
    assert framework_of(np.zeros(3), (X, Y)) == "torch"  # the first object that tells


def test_made_by_calls_the_factory_once_and_never_fails():
    calls = []

    def factory():
        calls.append(1)
        return nn.Linear(2, 2)

    assert made_by(factory, "factory") == "torch" and len(calls) == 1
    assert made_by(nn.Linear(2, 2), "a model") == "torch"  # a model where a factory belongs: not called
    assert made_by(nn.Linear, "a class") == "torch"  # a model class is a factory that tells without a call
    assert made_by(lambda: 1 / 0, "broken") is None  # its runs report the failure in their own words
    assert made_by(lambda: sys.exit(3), "exits") is None


# ---------------------------------------------------------------- bad framework values: one ValueError
@pytest.mark.parametrize("call", [
    lambda fw: ampkit.parity(lambda: nn.Linear(4, 3), (X, Y), (X, Y), framework=fw),
    lambda fw: ampkit.parity(model=lambda: nn.Linear(4, 3), data=lambda: ((X, Y), (X, Y)), framework=fw),
    lambda fw: ampkit.parity(dataset="digits", framework=fw),
    lambda fw: ampkit.bench("mlp", framework=fw),
    lambda fw: ampkit.doctor(fw, "cpu"),
])
@pytest.mark.parametrize("framework, needle", [("jax", "unknown framework 'jax'; choose from: torch, tensorflow"),
                                               (5, "framework must be a name such as 'torch'")])
def test_a_bad_framework_is_one_value_error_before_anything_runs(call, framework, needle):
    with pytest.raises(ValueError, match=needle) as info:
        call(framework)
    assert isinstance(info.value, UsageError) and "\n" not in str(info.value)


# ---------------------------------------------------------------- parity: auto is the model's framework
@pytest.mark.parametrize("train", ["tensors", "arrays"])
def test_parity_auto_runs_a_torch_model_on_torch(train):
    """Torch tensors say torch; NumPy arrays do not, so the factory's model says it (called once more)."""
    x, y = (X, Y) if train == "tensors" else (X.numpy(), Y.numpy())
    rep = ampkit.parity(lambda: nn.Linear(4, 3), (x, y), (x, y), modes="fp32", seeds=1, epochs=1, device="cpu",
                        progress=False)
    assert rep.environment["framework"] == "torch" and rep.results[0].metric["name"] == "accuracy"
    assert rep.results[0].verdict == "baseline" and len(rep.results[0].runs[0].train_loss) == 1


# ---------------------------------------------------------------- ParityData: one data shape, keywords
def test_parity_data_holds_one_shape_built_with_keywords():
    arrays = Arrays(x_train=X, y_train=Y, x_test=X[:4], y_test=Y[:4])
    data = ParityData(name="blobs", model="mlp", source=arrays, epochs=1)
    assert data.arrays is arrays and data.sets is None and data.data_spec is None
    with pytest.raises(TypeError):
        ParityData("blobs", "mlp", arrays, 1)  # positional: refused
    short = Arrays(x_train=X, y_train=Y, x_test=X[:4], y_test=Y[:3])
    with pytest.raises(UsageError, match="test needs as many targets as inputs, at least one; received 4 inputs, 3"):
        ParityData(name="blobs", model="mlp", source=short, epochs=1)
    with pytest.raises(UsageError, match="make_model must be a zero-argument callable"):  # the first wrong argument
        ampkit.parity()
    calls = []

    def make_data():
        calls.append(1)
        return (X, Y), (X[:4], Y[:4])

    sets = DataSets.from_factory(make_data, "mine:data")
    data = ParityData(name="own", model=lambda: nn.Linear(4, 3), source=sets, epochs=1)
    assert data.sets is sets and data.arrays is None and data.data_spec == "mine:data"
    again = sets.rebuilt()  # a tf.data pipeline is made again for every run
    assert len(calls) == 2 and again.spec == "mine:data" and again.train[0] is X
    with pytest.raises(UsageError, match=r"mine:three\(\) returned a tuple of 3; expected \(train, validation\)"):
        DataSets.from_factory(lambda: (1, 2, 3), "mine:three")
    with pytest.raises(dataclasses.FrozenInstanceError):
        data.source = arrays


# ---------------------------------------------------------------- doctor: a frozen config, run(config, backend)
def test_doctor_config_and_the_older_driver_call_give_the_same_rows():
    from ampkit.doctor import DoctorConfig, driver

    config = DoctorConfig(device="cpu", quick=True, modes="fp32,bfloat16")
    assert config.modes == ("fp32", "bf16")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.quick = False
    with pytest.raises(UsageError, match="unknown precision mode"):
        DoctorConfig(modes=("fp32", "fp64"))
    new = driver.run(config, "torch")
    old = driver.run("cpu", "torch", quick=True, modes=("fp32", "bf16"))  # the call before the config
    assert list(new.modes) == list(old.modes) == ["fp32", "bf16"] and new.quick and old.quick
    assert {m: r.selftest for m, r in new.modes.items()} == {m: r.selftest for m, r in old.modes.items()}
    with pytest.raises(TypeError, match="takes quick from the DoctorConfig"):
        driver.run(config, "torch", quick=False)
    lib = ampkit.doctor("torch", "cpu", quick=True, progress=False)  # the package is callable, like bench/parity
    assert list(inspect.signature(ampkit.doctor).parameters)[:2] == ["framework", "device"]
    assert lib.framework == "torch" and lib.quick and set(lib.modes) == set(ampkit.MODES)


# ---------------------------------------------------------------- Keras from the library (a child: TF stays out)
CHILD = r"""
import json, sys
import ampkit
import parity_keras_factories as pkf

if __name__ == "__main__":
    out = {}
    rep = ampkit.parity(model=pkf.mlp, data=pkf.arrays, modes="fp32,bf16", seeds=1, epochs=1, device="cpu",
                        progress=False)  # framework="auto": the model factory's Keras model says tensorflow
    out["parity_auto"] = rep.to_dict()
    (x, y), (xv, yv) = pkf.arrays()
    rep = ampkit.parity(pkf.mlp, (x, y), (xv, yv), modes="fp32", seeds=1, epochs=1, device="cpu", progress=False,
                        framework="tensorflow")
    out["parity_arrays"] = rep.to_dict()
    rep = ampkit.bench(model="parity_keras_factories:mlp", modes="fp32", steps=2, warmup=0, batch_size=8,
                       device="cpu", progress=False)
    out["bench_auto"] = rep.to_dict()
    print("RESULTS=" + json.dumps(out))
"""


@pytest.mark.slow  # TensorFlow in three processes (bench asks the factory in a child, probes, runs a mode): ~60 s
@pytest.mark.tensorflow
@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed")
def test_parity_and_bench_run_a_keras_model_from_the_library(tmp_path):
    script = tmp_path / "keras_library.py"  # a file: bench's children are spawned and re-import __main__
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))}
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=HERE, env=env)
    assert r.returncode == 0 and "RESULTS=" in r.stdout, r.stderr[-3000:]
    out = json.loads(r.stdout.split("RESULTS=", 1)[1])
    auto = out["parity_auto"]
    assert auto["environment"]["framework"] == "tensorflow" and [p["mode"] for p in auto["results"]] == ["fp32", "bf16"]
    assert all(p["metric"]["name"] == "accuracy" and 0 <= p["metric"]["mean"] <= 1 for p in auto["results"])
    arrays = out["parity_arrays"]  # a caller's arrays, read as a data factory's: checked, loss from the model's head
    assert arrays["environment"]["framework"] == "tensorflow" and arrays["results"][0]["verdict"] == "baseline"
    bench = out["bench_auto"]
    assert bench["environment"]["framework"] == "tensorflow" and bench["workload"] == "parity_keras_factories:mlp"
    row = bench["results"][0]
    assert row["mode"] == "fp32" and row["status"] == "ok" and row["samples_per_s"] > 0, row
