"""The planted models of the plan tests, in Keras (Keras 3 or tf_keras: ``k`` is the module)."""

from __future__ import annotations

import numpy as np


def attention_model(k, tf):
    class ScoresAttention(k.layers.Layer):
        """q @ k^T overflows float16 inside this layer's own call."""

        def __init__(self, d=16, gain=400.0, **kw):
            super().__init__(**kw)
            self.q, self.k, self.v = k.layers.Dense(d, name="q"), k.layers.Dense(d, name="k"), k.layers.Dense(d, name="v")
            self.gain = gain

        def call(self, x):
            q, kk = self.q(x) * self.gain, self.k(x) * self.gain
            s = tf.matmul(q, kk, transpose_b=True)
            s = s - tf.reduce_max(s, axis=-1, keepdims=True)
            return tf.matmul(tf.nn.softmax(s, axis=-1), self.v(x))

    k.utils.set_random_seed(0)
    inp = k.Input((6, 8))
    h = k.layers.Dense(16, activation="tanh", name="embed")(inp)
    h = ScoresAttention(name="attn")(h)
    h = k.layers.GlobalAveragePooling1D(name="pool")(h)
    out = k.layers.Dense(4, name="head")(h)
    return k.Model(inp, out)


def attention_data():
    rng = np.random.default_rng(0)
    return rng.standard_normal((64, 6, 8)).astype("float32"), rng.integers(0, 4, 64)


def cancel_model(k, tf):
    class Cancel(k.layers.Layer):
        def build(self, shape):
            rng = np.random.default_rng(1)
            w = rng.standard_normal((int(shape[-1]), 16)).astype("float32")
            self.w1 = self.add_weight(name="w1", shape=w.shape, initializer=k.initializers.Constant(w))
            self.w2 = self.add_weight(name="w2", shape=w.shape, initializer=k.initializers.Constant(
                w + 1e-3 * rng.standard_normal(w.shape).astype("float32")))

        def call(self, x):
            return (tf.matmul(x, self.w1) - tf.matmul(x, self.w2)) * 1e3

    k.utils.set_random_seed(0)
    inp = k.Input((16,))
    h = Cancel(name="cancel")(inp)
    h = k.layers.Dense(32, activation="relu", name="body")(h)
    return k.Model(inp, k.layers.Dense(4, name="head")(h))


def outlier_model(k, tf):
    k.utils.set_random_seed(0)
    mask = np.ones(32, "float32")
    mask[3] = 1e4
    inp = k.Input((32,))
    h = k.layers.Dense(32, activation="relu", name="first")(inp)
    h = k.layers.Lambda(lambda t: t * mask, name="outlier")(h)
    h = k.layers.Dense(32, name="mid")(h)
    h = k.layers.LayerNormalization(name="norm")(h)
    h = k.layers.Dense(32, activation="tanh", name="a")(h)
    h = k.layers.Dense(32, activation="tanh", name="b")(h)
    return k.Model(inp, k.layers.Dense(16, name="last")(h))


def keras_attention():
    """``--model plan_keras_models:keras_attention`` (Keras 3 on TensorFlow)."""
    import keras
    import tensorflow as tf

    return attention_model(keras, tf)
