"""Keras 3 on its torch and JAX backends, run by test_keras_backends.py in a child process with
KERAS_BACKEND set (the backend is fixed when Keras is imported). TensorFlow must never load here."""

from __future__ import annotations

import sys
import warnings


def _model(keras):
    # seeded initializers: keras.utils.set_random_seed would import TensorFlow to seed it too
    init = keras.initializers.GlorotUniform(seed=0)
    inputs = keras.Input((4,))
    h = keras.layers.Dense(8, name="hidden", kernel_initializer=init)(inputs)
    return keras.Model(inputs, keras.layers.Dense(2, dtype="float32", name="logits", kernel_initializer=init)(h))


def train_and_skip():
    import keras
    import numpy as np

    import ampkit.keras as ak

    backend = keras.backend.backend()
    mp = ak.MixedPrecision("fp16", initial_scale=64.0, dynamic_growth_steps=2)
    assert mp.backend == backend and mp.flavor.label.endswith(f"({backend})"), (mp.backend, mp.flavor.label)
    ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    x = np.linspace(-1, 1, 32, dtype="float32").reshape(8, 4)
    y = np.arange(8) % 2
    bad = x.copy()
    bad[3] = 1e6  # past float16's range in the first layer: inf/NaN gradients

    # fit: scale grows after 2 clean steps, halves (and the weights stay) on the bad batch
    with mp.scope():
        model = _model(keras)
        assert model.get_layer("hidden").compute_dtype == "float16"
        model.compile(optimizer=mp.optimizer(keras.optimizers.SGD(0.1)), loss=ce)
    assert mp.verify(model) == [], mp.verify(model)
    hist = mp.callback()
    model.fit(np.concatenate([x, x, bad]), np.concatenate([y, y, y]), batch_size=8, shuffle=False, verbose=0,
              callbacks=[hist])
    assert hist.scales == [64.0, 128.0, 64.0] and hist.skipped == [False, False, True], hist.scales
    print("fit ok", hist.scales)

    # custom loop through mp.train_step
    mp = ak.MixedPrecision("fp16", initial_scale=64.0, dynamic_growth_steps=2)
    with mp.scope():
        model = _model(keras)
    opt = mp.optimizer(keras.optimizers.SGD(0.1))
    scales, same = [], []
    for batch in (x, x, bad, x):
        w0 = [np.array(v.numpy()) for v in model.trainable_variables]
        loss = mp.train_step(model, opt, batch, y, ce)
        w1 = [np.array(v.numpy()) for v in model.trainable_variables]
        scales.append(ak.loss_scale_of(opt))
        same.append(all(np.array_equal(a, b) for a, b in zip(w0, w1)))
        assert all(np.isfinite(w).all() for w in w1)
    assert scales == [64.0, 128.0, 64.0, 64.0] and same == [False, False, True, False], (scales, same)
    assert float(np.asarray(loss)) > 0
    assert mp.stats["skipped"] == 1 and mp.health()["status"] == "ok", mp.health()
    print("loop ok", scales)

    # a float16 model never trains unscaled: a plain optimizer in train_step gets loss scaling
    mp = ak.MixedPrecision("fp16")  # the default initial scale, 2**15
    with mp.scope():
        model = _model(keras)
    plain = keras.optimizers.SGD(1e6)  # an update of 1e-11-sized gradients shows in float32 weights
    w0 = np.array(model.get_layer("hidden").kernel.numpy())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mp.train_step(model, plain, x, y, lambda t, p: ce(t, p) * 1e-9)
    assert any("does not scale the loss" in str(w.message) for w in caught), [str(w.message) for w in caught]
    assert not np.array_equal(w0, np.array(model.get_layer("hidden").kernel.numpy())), "gradients underflowed"
    print("unscaled ok")

    # the alarm: every step overflows
    mp = ak.MixedPrecision("fp16", initial_scale=4.0)
    with mp.scope():
        model = _model(keras)
    opt = mp.optimizer(keras.optimizers.SGD(0.1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(4):
            mp.train_step(model, opt, bad, y, ce)
    alarms = [w for w in caught if issubclass(w.category, ak.LossScaleWarning)]
    assert len(alarms) == 1 and "collapsed at step 3" in str(alarms[0].message), [str(w.message) for w in caught]   # 1-based: the 3rd step
    assert mp.health()["status"] == "collapsed", mp.health()
    print("alarm ok")
    assert "tensorflow" not in sys.modules, "TensorFlow was imported"
    print("no tensorflow")


if __name__ == "__main__":
    globals()[sys.argv[1]]()
