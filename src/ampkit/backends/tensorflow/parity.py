"""Parity for Keras: the same datasets, splits, data order, seeds and statistics as PyTorch (the flow:
:mod:`ampkit.parity.driver`)."""

from __future__ import annotations

import time

from ...parity.core import loader_order
from ...parity.ops import ParityData
from ...parity.report import RunRecord


def dataset_model(arch: str):
    """The model of a built-in dataset, the same shapes as the PyTorch backend's (channels last)."""
    import keras

    if arch == "mlp":
        inputs = keras.Input((64,))
        h = keras.layers.Dense(128, activation="relu")(inputs)
        h = keras.layers.Dense(128, activation="relu")(h)
    elif arch == "cnn":
        inputs = keras.Input((28, 28, 1))
        h = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inputs)
        h = keras.layers.MaxPooling2D()(h)
        h = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(h)
        h = keras.layers.MaxPooling2D()(h)
        h = keras.layers.Flatten()(h)
    else:
        raise ValueError(f"no Keras model for dataset architecture {arch!r}")
    out = keras.layers.Dense(10, dtype="float32", name="logits")(h)  # logits stay float32
    return keras.Model(inputs, out)


def train_one_tf(ds: ParityData, mode: str, seed: int, *, epochs: int, on_epoch=None) -> RunRecord:
    """Train one seed in one mode: a built-in architecture (``ds.model``, a name) or a caller's
    factory of a fresh Keras model, with AdamW and (unless ``ds`` names its own) sparse cross-entropy
    on logits, judged by accuracy."""
    import keras

    from .keras_engine import MixedPrecision

    mp = MixedPrecision(mode, keras="keras")  # the built-in models are Keras 3, whatever tf.keras resolves to
    x, y, xte, yte = ds.x_train, ds.y_train, ds.x_test, ds.y_test
    if x.ndim == 4:  # NCHW (the shared arrays) -> NHWC (Keras)
        x, xte = x.transpose(0, 2, 3, 1), xte.transpose(0, 2, 3, 1)
    history = mp.callback()
    rec = RunRecord(mode, seed, [], [], [], 0, 0.0)
    t0 = time.perf_counter()
    # build, train and evaluate inside the mode's scope: its policy, and TF32 on or off as the mode says
    with mp.scope():
        keras.utils.set_random_seed(seed)  # the same initial weights in every mode
        model = ds.model() if callable(ds.model) else dataset_model(ds.model)
        model.compile(optimizer=mp.optimizer(keras.optimizers.AdamW(ds.lr)),
                      loss=ds.loss_fn or keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=[ds.metric_fn or "accuracy"])
        for epoch in range(epochs):
            order = loader_order(len(x), seed, epoch)  # the same data order as PyTorch's parity
            hist = model.fit(x[order], y[order], batch_size=ds.batch_size, epochs=1, shuffle=False, verbose=0,
                             callbacks=[history])
            rec.train_loss.append(float(hist.history["loss"][0]))
            test_loss, acc = model.evaluate(xte, yte, batch_size=1024, verbose=0)
            rec.test_accuracy.append(float(acc))
            rec.test_loss.append(float(test_loss))
            if on_epoch:
                on_epoch(epoch + 1, epochs)
    rec.skipped_steps = history.skipped_steps
    rec.seconds = time.perf_counter() - t0
    return rec


class TensorFlowParity:
    """:class:`ampkit.parity.ops.ParityOps` for TensorFlow/Keras (the flow: :mod:`ampkit.parity.driver`)."""

    def train_seed(self, data: ParityData, mode: str, seed: int, target, *, epochs: int,
                   on_epoch=None) -> RunRecord:
        return train_one_tf(data, mode, seed, epochs=epochs, on_epoch=on_epoch)
