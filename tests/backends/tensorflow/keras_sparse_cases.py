"""Sparse gradients through ampkit.keras (issue #50 point 2), run in one child by test_keras_sparse.py:
Keras 3's own LossScaleOptimizer on the model (recorded), then ``fit``, ``mp.train_step`` (eager and
in a ``tf.function``) and a one-device MirroredStrategy (``fit`` and ``strategy.run``).

The model: an Embedding, a causal attention kept in float32 by a plan (``from_plan``), an average
and a float32 head. Only the Embedding computes in float16. The attention's gain on its values makes
the gradient w.r.t. its input exceed 65504 at the loss scale 2**15 at the first two positions of each
sample (causal attention: the early positions feed every later query), so the Embedding's gradient,
a ``tf.IndexedSlices`` with one row per token looked up, holds inf rows; every token's last row is
finite (the batch is arranged so). Everything else is finite.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

PLAN = {"kind": "ampkit-plan", "version": 1, "framework": "tensorflow", "default": "fp16", "modules": {"attn": "fp32"}}


def _parts():
    import keras
    import numpy as np
    from keras import ops

    class CausalAttention(keras.layers.Layer):
        def __init__(self, gain=30.0, **kw):
            super().__init__(**kw)
            self.gain = gain

        def build(self, shape):
            d = shape[-1]
            self.wq, self.wk, self.wv = (self.add_weight(shape=(d, d), name=n) for n in ("q", "k", "v"))

        def call(self, x):
            q, k = ops.matmul(x, self.wq), ops.matmul(x, self.wk)
            t = ops.shape(x)[1]
            s = ops.where(ops.tril(ops.ones((t, t), "bool")), ops.matmul(q, ops.transpose(k, (0, 2, 1))), -1e9)
            return ops.matmul(ops.softmax(s, axis=-1), ops.matmul(x, self.wv) * self.gain)

    def model():
        keras.utils.set_random_seed(0)
        tokens = keras.Input((4,), dtype="int32")
        h = keras.layers.Embedding(16, 8, name="emb")(tokens)
        h = CausalAttention(name="attn")(h)
        h = keras.layers.GlobalAveragePooling1D(name="pool")(h)
        return keras.Model(tokens, keras.layers.Dense(1, dtype="float32", name="head")(h))

    # each token's last row in the IndexedSlices (batch-major) sits at position 2 or 3: finite
    x = np.array([[1, 2, 1, 2], [2, 1, 2, 1]], "int32")
    return keras, np, model, x, np.ones((2, 1), "float32")


def _weights(model):
    return [v.numpy().copy() for v in model.trainable_variables]


def _unchanged_finite(np, before, model) -> bool:
    after = _weights(model)
    return all(np.isfinite(w).all() for w in after) and all(np.array_equal(a, b) for a, b in zip(before, after))


def _engine(ak, model_fn):
    mp = ak.MixedPrecision.from_plan(PLAN)
    with mp.scope():
        model = mp.prepare(model_fn())
    assert [lay.compute_dtype for lay in model.layers[1:]] == ["float16", "float32", "float16", "float32"]
    return mp, model


def _sparse_grads(tf, keras, model, x, y, scale):
    with tf.GradientTape() as tape:
        loss = keras.ops.mean(keras.losses.mean_squared_error(y, model(x, training=True))) * scale
    return tape.gradient(loss, model.trainable_variables)


def keras_own():
    """Keras's own LossScaleOptimizer (no ampkit callback to upgrade it): check_finite on the planted
    gradients, then fit on them. Prints what this Keras does."""
    import tensorflow as tf

    import ampkit.keras as ak

    keras, np, model_fn, x, y = _parts()
    mp, model = _engine(ak, model_fn)
    grads = _sparse_grads(tf, keras, model, x, y, 2.0**15)
    emb = grads[0]
    assert isinstance(emb, tf.IndexedSlices), type(emb)
    rows = tf.reduce_all(tf.math.is_finite(emb.values), axis=-1).numpy().tolist()
    assert rows == [False, False, True, True] * 2, rows  # the plant: inf rows, each token's last row finite
    assert all(bool(tf.reduce_all(tf.math.is_finite(g))) for g in grads[1:]), "only the Embedding overflows"
    own = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1))
    says = bool(own.check_finite(grads))
    model.compile(optimizer=own, loss="mse")
    model.fit(x, y, batch_size=2, epochs=1, shuffle=False, verbose=0)
    finite = all(np.isfinite(w).all() for w in _weights(model))
    print(f"keras {keras.__version__} own check_finite {says} scale {float(own.dynamic_scale.numpy())} "
          f"weights finite {finite}")
    print(f"ampkit check_finite {bool(ak.MixedPrecision('fp16').optimizer(keras.optimizers.SGD()).check_finite(grads))}")


def fit():
    """fit through mp.optimizer: the overflowing batch skipped (scale halved, weights untouched and
    finite), then a clean batch (targets the model's own predictions) trains."""
    import ampkit.keras as ak

    keras, np, model_fn, x, y = _parts()
    mp, model = _engine(ak, model_fn)
    model.compile(optimizer=mp.optimizer(keras.optimizers.SGD(0.1)), loss="mse")
    w0, hist = _weights(model), mp.callback()
    model.fit(x, y, batch_size=2, epochs=1, shuffle=False, verbose=0, callbacks=[hist])
    assert hist.scales == [16384.0] and hist.skipped == [True], (hist.scales, hist.skipped)
    assert _unchanged_finite(np, w0, model), "fit applied the step"
    clean = model.predict(x, verbose=0) + 1e-2
    model.fit(x, clean, batch_size=2, epochs=1, shuffle=False, verbose=0, callbacks=[hist])
    assert hist.skipped == [True, False] and not _unchanged_finite(np, w0, model), hist.scales
    assert all(np.isfinite(w).all() for w in _weights(model)) and mp.stats["skipped"] == 1, mp.stats
    print("fit ok", hist.scales)


def train_step():
    """mp.train_step eager and inside a tf.function: skipped, the scale halved each time, weights finite."""
    import tensorflow as tf

    import ampkit.keras as ak

    keras, np, model_fn, x, y = _parts()
    mse = keras.losses.MeanSquaredError()
    for traced in (False, True):
        mp, model = _engine(ak, model_fn)
        opt = mp.optimizer(keras.optimizers.SGD(0.1))
        step = tf.function(mp.train_step) if traced else mp.train_step
        w0, scales = _weights(model), []
        for _ in range(2):
            step(model, opt, tf.constant(x), tf.constant(y), mse)
            scales.append(float(opt.dynamic_scale.numpy()))
        assert _unchanged_finite(np, w0, model), ("train_step applied", traced)
        assert scales[0] == 16384.0 and scales[1] in (8192.0, 16384.0), scales
        if not traced:
            assert mp.stats["skipped"] >= 1 and mp.stats["scale"] == scales[-1], mp.stats
        print("train_step ok", "traced" if traced else "eager", scales)


def audit_words():
    """The fp16 audit at 2**15: its findings on the Embedding say the optimizer skips such steps; their
    code, run on the user's optimizer, makes one that does at 2**15 (fit skips, the scale halves) and,
    at the scale the finding names, trains finite."""
    import ampkit
    import ampkit.keras as ak

    keras, np, model_fn, x, y = _parts()
    rep = ampkit.audit(model_fn, (x, y), lambda p, t: keras.ops.mean((p - t) ** 2), framework="tensorflow",
                       mode="fp16", steps=1, loss_scale=2.0**15)
    emb = [f for f in rep.findings if f.layer == "emb" and f.kind == "overflow" and f.code]
    said = ("ampkit's LossScaleOptimizer skips such steps", "ampkit's LossScaleOptimizer finds it non-finite and skips")
    assert emb and all(any(s in f.advice for s in said) for f in emb), [f.advice for f in rep.findings]
    for f in emb:
        named = f.code.split("initial_scale=")[1].split(")")[0]
        for scale, skips in (("32768", True), (named, False)):
            space = {"ampkit": ampkit, "optimizer": keras.optimizers.SGD(0.1)}
            exec(f.code.replace(f"initial_scale={named}", f"initial_scale={scale}"), space)
            mp, model = _engine(ak, model_fn)
            model.compile(optimizer=space["optimizer"], loss="mse")
            w0 = _weights(model)
            model.fit(x, y, batch_size=2, epochs=1, shuffle=False, verbose=0)
            after = float(space["optimizer"].dynamic_scale.numpy())
            assert (after < float(scale)) == skips and _unchanged_finite(np, w0, model) == skips, (f.code, scale, after)
            assert all(np.isfinite(w).all() for w in _weights(model)), (f.code, scale)
    print("audit words ok", len(emb), emb[0].code)


def mirrored():
    """A one-device MirroredStrategy: fit and strategy.run(mp.train_step) in a tf.function."""
    import tensorflow as tf
    from keras_dist_cases import strategy_loop

    import ampkit.keras as ak

    keras, np, model_fn, x, y = _parts()
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    mp = ak.MixedPrecision.from_plan(PLAN)
    with strategy.scope(), mp.scope():
        model = mp.prepare(model_fn())
        model.compile(optimizer=mp.optimizer(keras.optimizers.SGD(0.1)), loss="mse")
    w0, hist = _weights(model), mp.callback()
    model.fit(x, y, batch_size=2, epochs=1, shuffle=False, verbose=0, callbacks=[hist])
    assert hist.scales == [16384.0] and hist.skipped == [True], hist.scales
    assert _unchanged_finite(np, w0, model), "mirrored fit applied the step"
    print("mirrored fit ok", hist.scales)

    with strategy.scope(), mp.scope():
        model = mp.prepare(model_fn())
        opt = mp.optimizer(keras.optimizers.SGD(0.1))
    mse = keras.losses.MeanSquaredError(reduction="sum")

    def loss_fn(t, p):
        return mse(t, p) / 2.0  # the global batch

    step, data = strategy_loop(tf, strategy, mp, model, opt, loss_fn, x, y, 2)
    w0 = _weights(model)
    for xb, yb in data:
        step(xb, yb)
    assert float(opt.dynamic_scale.numpy()) == 16384.0 and _unchanged_finite(np, w0, model), "mirrored loop applied"
    print("mirrored loop ok", float(opt.dynamic_scale.numpy()))


if __name__ == "__main__":
    for name in sys.argv[1:]:  # several scenarios in one process: TensorFlow loads once
        globals()[name]()
