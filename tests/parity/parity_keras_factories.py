"""Keras model and data factories as a user writes them (run by tests/parity/test_parity_keras.py
in a child process: TensorFlow never loads in the test process)."""

from __future__ import annotations

import numpy as np


def mlp():
    import keras

    inputs = keras.Input((8,))
    h = keras.layers.Dense(32, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(4, dtype="float32")(h))  # logits kept in float32


def arrays():
    rng = np.random.default_rng(0)
    centers = rng.normal(0, 2, (4, 8))
    y = rng.integers(0, 4, 320)
    x = (centers[y] + rng.normal(0, 1, (320, 8))).astype("float32")
    return (x[:256], y[:256]), (x[256:], y[256:])


def datasets():
    """The same data as batched tf.data pipelines, the training one shuffled without a seed."""
    import tensorflow as tf

    (x, y), (xv, yv) = arrays()
    train = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256).batch(32)
    return train, tf.data.Dataset.from_tensor_slices((xv, yv)).batch(64)


def not_a_model():
    return object()


def wrong_features():
    (x, y), val = arrays()
    return (np.zeros((64, 5), "float32"), y[:64]), val


def empty():
    (x, y), val = arrays()
    return (x[:0], y[:0]), val


def endless():
    """A training pipeline that repeats forever: without --steps it has no epochs (issue #40: it hung)."""
    import tensorflow as tf

    (x, y), (xv, yv) = arrays()
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat(), tf.data.Dataset.from_tensor_slices((xv, yv)).batch(64)


def unbatched():
    """Pipelines of single samples: Keras said only 'Exception encountered when calling ...' (issue #40)."""
    import tensorflow as tf

    (x, y), (xv, yv) = arrays()
    return tf.data.Dataset.from_tensor_slices((x, y)), tf.data.Dataset.from_tensor_slices((xv, yv))


def softmax_mlp():
    """Ends in a softmax (probabilities, as keras.applications do): ampkit picks from_logits=False."""
    import keras

    inputs = keras.Input((8,))
    h = keras.layers.Dense(32, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(4, activation="softmax", dtype="float32")(h))


def pressures():
    """Raw pressures in pascals: beyond fp16's 65,504 once cast."""
    (x, y), (xv, yv) = arrays()
    return (x * 3e4, y), (xv * 3e4, yv)


def ordered_datasets():
    """arrays() as batched tf.data pipelines without a shuffle: one pipeline gives the same batches
    every time it is read, so the library's pipelines (read again in every run) and a factory's
    (rebuilt for every run) train alike."""
    import tensorflow as tf

    (x, y), (xv, yv) = arrays()
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(32), tf.data.Dataset.from_tensor_slices((xv, yv)).batch(64)


def noise():
    """Targets drawn apart from the inputs: nothing to learn, fp32 stays at chance (issue #46)."""
    rng = np.random.default_rng(1)
    x = rng.normal(0, 1, (320, 8)).astype("float32")
    y = rng.integers(0, 4, 320)
    return (x[:256], y[:256]), (x[256:], y[256:])
