"""Child process of test_keras_fp8.py: every Keras fp8 check in one TensorFlow start. Prints one
JSON line per case, ``{"case": name, ...}``; the parent asserts on them."""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ["CUDA_VISIBLE_DEVICES"] = ""  # this CPU: emulated fp8 wherever the suite runs

import numpy as np  # noqa: E402


def out(case: str, **kw) -> None:
    print(json.dumps({"case": case, **kw}, default=str), flush=True)


def build(keras, last_float32: bool = True):
    keras.utils.set_random_seed(0)
    inp = keras.Input((32,), name="x")
    h = keras.layers.Dense(64, activation="relu", name="first")(inp)
    h = keras.layers.Dense(100, activation="relu", name="mid100")(h)
    h = keras.layers.EinsumDense("ab,bc->ac", output_shape=30, name="ein30")(h)
    return keras.Model(inp, keras.layers.Dense(10, dtype="float32" if last_float32 else None, name="logits")(h))


def main() -> None:
    import keras

    import ampkit.keras as ak
    from ampkit.backends.tensorflow.doctor import selftest
    from ampkit.backends.tensorflow.engine.fp8 import fp8_support
    from ampkit.backends.tensorflow.environment import TensorFlowEnvironment
    from ampkit.backends.tensorflow.flavor import Flavor
    from ampkit.errors import ModeUnavailableError, UsageError

    rng = np.random.default_rng(1)
    x = rng.normal(size=(64, 32)).astype("float32")
    y = (np.arange(64) % 10).astype("int64")
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    # the engine: conversion report, fit, and the same step done by hand with Keras's API
    mp = ak.MixedPrecision("fp8")
    with mp.scope():
        model = mp.prepare(build(keras))
        model.compile(keras.optimizers.SGD(0.05), loss=loss)
    hist = model.fit(x, y, epochs=4, batch_size=64, verbose=0, shuffle=False).history["loss"]
    layers = {lay.name: (getattr(lay, "quantization_mode", None), lay.dtype_policy.name) for lay in model.layers}
    out("engine", mode=mp.mode, emulated=mp.emulated, reason=mp.reason, policy=mp.policy, fp8_layers=mp.fp8_layers,
        losses=hist, layers=layers, verify=mp.verify(model),
        scale=float(model.get_layer("mid100").inputs_scale.numpy()),
        var_dtypes=sorted({v.dtype for v in model.trainable_variables}))

    keras.config.set_dtype_policy("mixed_bfloat16")  # Keras by hand: its float8 guide's order
    try:
        ref = build(keras)
        ref.quantize("float8", filters=["mid100", "ein30"])
        ref.compile(keras.optimizers.SGD(0.05), loss=loss)
        ref_hist = ref.fit(x, y, epochs=4, batch_size=64, verbose=0, shuffle=False).history["loss"]
    finally:
        keras.config.set_dtype_policy("float32")
    same_w = all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(model.variables, ref.variables, strict=True))
    out("by_hand", losses=ref_hist, same_weights=same_w)

    mp_all = ak.MixedPrecision("fp8", fp8_skip_first_last=False, fp8_filter=lambda lay: lay.name != "ein30")
    with mp_all.scope():
        mp_all.prepare(build(keras))
    out("all", fp8_layers=mp_all.fp8_layers)

    errors = {}
    for name, fn in {
        "unbuilt": lambda: ak.MixedPrecision("fp8").prepare(keras.Sequential([keras.layers.Dense(16)])),
        "filter_not_fp8": lambda: ak.MixedPrecision("bf16", fp8_filter=lambda lay: True),
        "after_fit": lambda: ak.MixedPrecision("fp8").prepare(model),
        "tf_keras": lambda: ak.MixedPrecision("fp8", keras="tf_keras"),
    }.items():
        try:
            fn()
            errors[name] = None
        except (UsageError, ModeUnavailableError) as exc:
            errors[name] = [type(exc).__name__, str(exc)]
    import warnings

    one = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, name="only")])
    mp_one = ak.MixedPrecision("fp8")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mp_one.prepare(one)
    out("none_converted", fp8_layers=mp_one.fp8_layers, warnings=[str(w.message) for w in caught])
    mp16 = ak.MixedPrecision("bf16")
    plain = build(keras)
    out("errors", errors=errors, bf16_same=mp16.prepare(plain) is plain, bf16_layers=mp16.fp8_layers,
        bf16_emulated=mp16.emulated)

    env = TensorFlowEnvironment()
    out("support", backend=list(env.training_support("fp8", env.target("cpu"))), hardware=list(env.mode_support(
        "fp8", env.target("cpu"))), tf_keras=list(fp8_support(Flavor("tf_keras"))), jax=list(fp8_support(None, "jax")))
    out("selftest", result=list(selftest("fp8")))


if __name__ == "__main__":
    sys.exit(main())
