"""The TensorFlow mixed-precision tutorial's custom training loop (Keras 2), written with ampkit.keras.

The tutorial that ships with the TensorFlow image is Keras 2 code: ``mixed_precision.set_global_policy``,
a ``dtype='float32'`` output layer, and a ``LossScaleOptimizer`` driven through ``get_scaled_loss`` /
``get_unscaled_gradients``. Keras 3 removed those two methods (it has ``scale_loss``, and ``apply``
unscales), so the code runs only on Keras 2, which lives on as ``tf_keras`` (``TF_USE_LEGACY_KERAS=1``
makes ``tf.keras`` resolve to it; ``pip install 'ampkit[tf-keras]'``). Here the same loop goes
through ``ampkit.keras.MixedPrecision``, which picks the right calls for either Keras:

    tutorial (Keras 2 only)                          ampkit (Keras 2 or 3)
    mixed_precision.set_global_policy(...)           with mp.scope():   (restored afterwards)
    mixed_precision.LossScaleOptimizer(opt)          mp.optimizer(opt)  (only in fp16)
    get_scaled_loss / get_unscaled_gradients /       mp.train_step(model, opt, x, y, loss_fn)
      apply_gradients

The data are scikit-learn's digits (they ship with the package; nothing is downloaded).

    python examples/keras2_custom_loop.py [--mode fp16|bf16|fp32|auto] [--epochs 5]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf.keras -> tf_keras (Keras 2), as the tutorial's users run it
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from tensorflow import keras  # noqa: E402
from tensorflow.keras import layers  # noqa: E402

import ampkit.keras as ak  # noqa: E402


def data(seed=0):
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype("float32")
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    return (x[:1500], y[:1500]), (x[1500:], y[1500:])


def build(mp):
    """The tutorial's model: mixed-policy hidden layers, and a softmax kept in float32."""
    with mp.scope():  # the tutorial's set_global_policy('mixed_float16'), restored when the block ends
        keras.utils.set_random_seed(0)
        inputs = keras.Input(shape=(64,), name="digits")
        x = layers.Dense(256, activation="relu", name="dense_1")(inputs)
        x = layers.Dense(256, activation="relu", name="dense_2")(x)
        x = layers.Dense(10, name="dense_logits")(x)
        outputs = layers.Activation("softmax", dtype="float32", name="predictions")(x)
        model = keras.Model(inputs=inputs, outputs=outputs)
        optimizer = mp.optimizer(keras.optimizers.RMSprop())  # LossScaleOptimizer in fp16, as the tutorial wraps it
    mp.check_model(model)  # warns if the output were float16
    return model, optimizer


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", default="fp16")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=50)
    args = ap.parse_args(argv)

    mp = ak.MixedPrecision(args.mode)  # keras=None: the Keras tf.keras resolves to (tf_keras here)
    print(f"mode {mp.mode} ({mp.reason}); {mp.flavor.label}; tf.keras is {keras.Model.__module__.split('.')[0]}")
    (x, y), (x_test, y_test) = data()
    model, optimizer = build(mp)
    loss_object = keras.losses.SparseCategoricalCrossentropy()

    @tf.function
    def train_step(x, y):
        # Keras 2: get_scaled_loss -> gradient -> get_unscaled_gradients -> apply_gradients (skips on inf)
        return mp.train_step(model, optimizer, x, y, loss_object)

    @tf.function
    def test_step(x):
        return model(x, training=False)

    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1500, seed=0).batch(args.batch_size)
    for epoch in range(args.epochs):
        losses, skipped = [], 0
        for xb, yb in dataset:
            before = ak.loss_scale_of(optimizer)  # reading the scale is a host-device sync: an example's luxury
            losses.append(float(train_step(xb, yb)))
            after = ak.loss_scale_of(optimizer)
            skipped += int(before is not None and after < before)
        acc = float(np.mean(np.argmax(test_step(x_test).numpy(), axis=1) == y_test))
        scale = ak.loss_scale_of(optimizer)
        print(f"epoch {epoch + 1}: loss {np.mean(losses):.4f}  test accuracy {acc:.3f}"
              + (f"  loss scale {scale:g}, {skipped} skipped step(s)" if scale is not None else ""))
    return acc


if __name__ == "__main__":
    main()
