"""A planted Keras model (``--model keras_planted:always_overflow``): the loss is 1e8 x the output
mean, so under mixed_float16 the float16 gradients overflow at every scale the LossScaleOptimizer
reaches in a few steps, and every step is skipped."""

from __future__ import annotations

import numpy as np


def always_overflow():
    import keras

    from ampkit.backends.tensorflow.workloads import KerasWorkload

    inputs = keras.Input((8,))
    hidden = keras.layers.Dense(8, name="hidden")(inputs)          # float16 under mixed_float16
    out = keras.layers.Dense(1, dtype="float32", name="out")(hidden)

    def make_batch(n, seed):
        rng = np.random.default_rng(seed)
        return rng.standard_normal((n, 8)).astype("float32"), np.zeros((n, 1), "float32")

    def loss(y_true, y_pred):
        return 1e8 * keras.ops.mean(y_pred)

    return KerasWorkload(keras.Model(inputs, out), make_batch, loss=loss, name="always_overflow", batch_size=4,
                         lr=1e-9)
