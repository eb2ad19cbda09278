"""Keras audits on the user's data and on a nested application (issue #50 point 6, issue #46 point 4):
the factories the CLI tests name (``tf_data_cases:...``) and the library cases test_tf_audit_data.py
runs in one child (one TensorFlow import): the bodies print ``<case> ok`` or raise."""

from __future__ import annotations

import os
import sys

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


# ----------------------------------------------------------------------------------- factories
def transfer():
    """The transfer-learning shape: a keras.applications backbone used as a layer of a functional model."""
    import keras

    base = keras.applications.MobileNetV2(input_shape=(32, 32, 3), weights=None, include_top=False, alpha=0.35)
    inputs = keras.Input((32, 32, 3))
    h = keras.layers.GlobalAveragePooling2D(name="pool")(base(inputs))
    return keras.Model(inputs, keras.layers.Dense(5, dtype="float32", name="logits")(h))


def images():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((6, 32, 32, 3)) * 2).astype("float32"), rng.integers(0, 5, 6)


def bare():
    """A Sequential without an Input: it declares no input shape (the data gives it)."""
    import keras

    return keras.Sequential([keras.layers.Dense(8, name="hidden"), keras.layers.Dense(3, dtype="float32", name="out")])


def wide():
    rng = np.random.default_rng(1)
    return (rng.standard_normal((24, 64)) * 3).astype("float32"), rng.integers(0, 3, 24)


def wide_dataset():
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices(wide()).batch(5)


def wide_regression():
    x, _ = wide()
    return x, np.random.default_rng(2).standard_normal((24, 3)).astype("float32")


def wide_train_val():
    return wide(), wide()


def _nested(k):
    inner_in = k.Input((64,))
    inner = k.Model(inner_in, k.layers.Dense(8, name="inner_dense")(inner_in), name="inner")
    x = k.Input((64,))
    return k.Model(x, k.layers.Dense(3, dtype="float32", name="head")(inner(x)))


def nested_keras():
    import keras

    return _nested(keras)


def nested_tf_keras():
    import tf_keras

    return _nested(tf_keras)


def not_data():
    return {"x": 1}


# ----------------------------------------------------------------------------------- library cases
def _audit(mode="bf16", **kw):
    from ampkit.audit.config import AuditConfig
    from ampkit.audit.driver import audit_here
    from ampkit.registry import get_backend

    return audit_here(AuditConfig(mode=mode, device="cpu", **kw), get_backend("tensorflow"))


def data_cases():
    from ampkit.errors import UsageError

    spec = "tf_data_cases:"
    rep = _audit(model=spec + "bare", data=spec + "wide", batch_size=8)  # no input_shape: the data's
    assert rep.input["kind"] == "data" and rep.input["shape"] == [8, 64] and rep.input["from"] == spec + "wide", rep.input
    assert rep.input["max"] > 5 and [lay.name for lay in rep.layers] == ["hidden", "out"], rep.input
    print("arrays ok")
    rep = _audit(model=spec + "bare", data=spec + "wide_dataset", batch_size=8)  # a dataset keeps its own batch
    assert rep.input["shape"] == [5, 64], rep.input
    print("dataset ok")
    rep = _audit(model=spec + "bare", data=spec + "wide_train_val")
    assert rep.input["shape"] == [24, 64] and rep.input["from"] == spec + "wide_train_val", rep.input
    print("train_val ok")
    rep = _audit(model=spec + "bare", data=spec + "wide_regression", batch_size=8)  # float targets: squared error
    assert rep.input["shape"] == [8, 64] and rep.first_nonfinite is None and rep.layers[-1].grad_amax > 0
    print("regression ok")
    assert _audit(model=spec + "bare", data=spec + "wide", input_shape=(64,)).input["shape"] == [24, 64]
    for given, data in (((3,), "wide"), ((64, 1), "wide_dataset")):
        try:
            _audit(model=spec + "bare", data=spec + data, input_shape=given)
            raise AssertionError(f"{given} beside {data} accepted")
        except UsageError as exc:
            assert f"contradicts the data {spec}{data}, whose inputs are 64 per sample" in str(exc), exc
    try:
        _audit(model=spec + "bare", data=spec + "not_data")
        raise AssertionError("a dict accepted as data")
    except UsageError as exc:
        assert "the audit data is a dict" in str(exc), exc
    print("refusals ok")
    for flavor in ("keras", "tf_keras"):  # a model nested as a layer, in both Kerases: its outer call measured
        rep = _audit(model=f"{spec}nested_{flavor}", data=spec + "wide", mode="fp16")
        rows = [(lay.name, lay.type) for lay in rep.layers]
        assert rows == [("inner", "Functional"), ("head", "Dense")], rows
        assert all(lay.fwd_amax > 0 and lay.grad_amax > 0 and lay.param_grad_amax for lay in rep.layers), rep.layers
    print("nested ok")


if __name__ == "__main__":
    for name in sys.argv[1:]:
        globals()[name]()
