"""Keras under tf.distribute, run in a child process by test_keras_distributed.py (two logical CPU
devices must be configured before TensorFlow initialises, so never in the pytest process)."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _two_cpus():
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert strategy.num_replicas_in_sync == 2
    return tf, strategy


def _model(keras):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    h = keras.layers.Dense(8, name="hidden")(inputs)
    return keras.Model(inputs, keras.layers.Dense(2, dtype="float32", name="logits")(h))


def _batches(np):
    """Three global batches of 8 samples, 4 per replica (MirroredStrategy splits a batch in order):
    an overflowing sample (1e6 * weights is past float16's 65504) on replica 0, then on replica 1,
    then a clean batch."""
    x = np.tile(np.linspace(-1, 1, 32, dtype="float32").reshape(8, 4), (3, 1))
    x[1] = 1e6        # batch 0, replica 0
    x[8 + 4 + 2] = 1e6  # batch 1, replica 1
    return x, np.arange(24) % 2


def _weights(model):
    return [v.numpy().copy() for v in model.trainable_variables]


def _same(np, a, b):
    return all(np.array_equal(u, v) for u, v in zip(a, b))


def _check(np, snapshots, where):
    """Weights after each batch: unchanged and finite after both bad batches, changed after the clean one."""
    w0, w1, w2, w3 = snapshots
    assert all(np.isfinite(w).all() for snap in snapshots for w in snap), where
    assert _same(np, w0, w1), (where, "replica 0 overflow applied")
    assert _same(np, w1, w2), (where, "replica 1 overflow applied")
    assert not _same(np, w2, w3), (where, "clean batch did not train")


def mirrored():
    tf, strategy = _two_cpus()
    import keras
    import numpy as np

    import ampkit.keras as ak

    x, y = _batches(np)
    # fit, shuffle=False
    mp = ak.MixedPrecision("fp16", initial_scale=64.0)
    with strategy.scope(), mp.scope():
        model = _model(keras)
        model.compile(optimizer=mp.optimizer(keras.optimizers.SGD(0.1)),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    snapshots = [_weights(model)]

    class Snap(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            snapshots.append(_weights(model))

    hist = mp.callback()
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[hist, Snap()])
    assert hist.scales == [32.0, 16.0, 16.0] and hist.skipped == [True, True, False], hist.scales
    _check(np, snapshots, "fit")
    assert mp.stats["skipped"] == 2 and mp.stats["scale"] == 16.0, mp.stats
    print("fit ok", hist.scales)

    # the LossScaleOptimizer that compile makes itself for a mixed_float16 model: the callback gives it
    # ampkit's cross-replica skip before fit traces (Keras's own would NaN on replica 1's overflow)
    keras.config.set_dtype_policy("mixed_float16")
    try:
        with strategy.scope():
            model = _model(keras)
            model.compile(optimizer=keras.optimizers.SGD(0.1),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    finally:
        keras.config.set_dtype_policy("float32")
    assert type(model.optimizer) is keras.optimizers.LossScaleOptimizer
    w0 = _weights(model)
    hist = mp.callback()
    model.fit(x[8:16], y[8:16], batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[hist])
    assert hist.skipped == [True] and _same(np, w0, _weights(model)), (hist.scales, "keras-made optimizer")
    print("compile-made ok")

    _custom_loop(tf, strategy, x, y)

    mp = ak.MixedPrecision("bf16")
    with strategy.scope(), mp.scope():
        model = _model(keras)
        model.compile(optimizer=mp.optimizer(keras.optimizers.SGD(0.1)),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert model.get_layer("hidden").compute_dtype == "bfloat16"
    w0 = _weights(model)
    loss = model.fit(x[16:], y[16:], batch_size=8, epochs=2, shuffle=False, verbose=0).history["loss"]
    assert np.isfinite(loss).all() and not _same(np, w0, _weights(model)), loss
    print("bf16 ok")


def strategy_loop(tf, strategy, mp, model, opt, loss_fn, x, y, batch: int):
    """``strategy.run(mp.train_step)`` in a ``tf.function``, and ``(x, y)`` distributed in batches of ``batch``."""
    @tf.function
    def step(xb, yb):
        return strategy.run(mp.train_step, args=(model, opt, xb, yb, loss_fn))

    return step, strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(batch))


def _custom_loop(tf, strategy, x, y):
    """strategy.run(mp.train_step) in a tf.function, no opt.build."""
    import keras
    import numpy as np

    import ampkit.keras as ak

    mp = ak.MixedPrecision("fp16", initial_scale=64.0)
    with strategy.scope(), mp.scope():
        model = _model(keras)
        opt = mp.optimizer(keras.optimizers.SGD(0.1))
    per_sample = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")

    def loss_fn(y, p):
        return per_sample(y, p) / 8.0  # the global batch

    step, data = strategy_loop(tf, strategy, mp, model, opt, loss_fn, x, y, 8)
    snapshots, scales = [_weights(model)], []
    for xb, yb in data:
        step(xb, yb)
        snapshots.append(_weights(model))
        scales.append(float(opt.dynamic_scale.numpy()))
    assert scales == [32.0, 16.0, 16.0], scales
    _check(np, snapshots, "custom loop")
    # the same step run eagerly (no tf.function): the alarm is fed once a step, from the shared scale
    assert mp.stats["steps"] == 0, mp.stats  # a traced step cannot feed it (README)
    for xb, yb in data:
        strategy.run(mp.train_step, args=(model, opt, xb, yb, loss_fn))
    want = float(opt.dynamic_scale.numpy())
    assert mp.stats["steps"] == 3 and mp.stats["scale"] == want, (mp.stats, want)
    print("loop ok", scales)


if __name__ == "__main__":
    import keras_policy_cases

    for name in sys.argv[1:]:  # several scenarios in one process: TensorFlow loads once
        (globals().get(name) or getattr(keras_policy_cases, name))()
