"""Parity for Keras: the same datasets, splits, data order, seeds and statistics as PyTorch (the flow:
:mod:`ampkit.parity.driver`)."""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from ...factory import call_user
from ...parity.ops import DataSets, ParityData, loader_order, of_targets
from ...parity.report import RunRecord
from .parity_data import is_dataset, prepare


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


def _epochs_of_arrays(x, y, seed: int, epochs: int, steps: int | None, batch_size: int):
    """Per evaluation, the (x, y) to fit: one epoch in the paired order each, or with ``steps`` one
    chunk of ``steps`` batches taken from the paired orders of successive epochs."""
    if not steps:
        for epoch in range(epochs):
            order = loader_order(len(x), seed, epoch)  # the same data order as PyTorch's parity
            yield x[order], y[order]
        return
    need = steps * batch_size
    order = np.concatenate([loader_order(len(x), seed, e) for e in range(-(-need // len(x)))])[:need]
    yield x[order], y[order]


def first_loss_callback(keras):
    """A callback that keeps the first training batch's loss (did the loss fall? :mod:`ampkit.parity.chance`);
    given to the first ``fit`` only, it reads one value once."""

    class FirstLoss(keras.callbacks.Callback):
        value = None

        def on_train_batch_end(self, batch, logs=None):
            if self.value is None and logs and "loss" in logs:
                self.value = float(logs["loss"])

    return FirstLoss()


def train_one(ds: ParityData, mode: str, seed: int, *, epochs: int, on_epoch=None) -> RunRecord:
    """Train one seed in one mode: a built-in architecture (``ds.model``, a name) or a caller's
    factory of a fresh Keras model, with AdamW and (unless ``ds`` names its own) sparse cross-entropy
    on logits, judged by accuracy (or, for a caller's data without class targets, the loss)."""
    import keras

    from .engine.mixed_precision import MixedPrecision

    mp = MixedPrecision(mode, keras="keras")  # the built-in models are Keras 3, whatever tf.keras resolves to
    user = ds.sets is not None
    history = mp.callback()
    first = first_loss_callback(keras)
    rec = RunRecord(mode, seed, [], [], [], 0, 0.0, steps=ds.steps)
    t0 = time.perf_counter()
    # build, train and evaluate inside the mode's scope: its policy, and TF32 on or off as the mode says
    with mp.scope():
        keras.utils.set_random_seed(seed)  # the same initial weights (and tf.data order) in every mode
        if user:
            train, test = ds.sets.train, ds.sets.test
            if ds.sets.factory is not None and (is_dataset(train) or is_dataset(test)):
                parts = ds.sets.rebuilt()  # after seeding: the same pipeline order in every mode
                train = parts.train if is_dataset(train) else train
                test = parts.test if is_dataset(test) else test
                keras.utils.set_random_seed(seed)
        else:
            a = ds.arrays
            x, y, xte, yte = a.x_train, a.y_train, a.x_test, a.y_test
            if x.ndim == 4:  # NCHW (the shared arrays) -> NHWC (Keras)
                x, xte = x.transpose(0, 2, 3, 1), xte.transpose(0, 2, 3, 1)
            train, test = (x, y), (xte, yte)
        model = (call_user(ds.model, ds.model_spec or getattr(ds.model, "__name__", "the model factory"))
                 if callable(ds.model) else dataset_model(ds.model))
        model = mp.prepare(model)  # fp8: Keras float8 layers (before compile); other modes: as it is
        with_metric = ds.metric != "loss"
        model.compile(optimizer=mp.optimizer(keras.optimizers.AdamW(ds.lr)),
                      loss=ds.loss_fn or keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=[ds.metric_fn or "accuracy"] if with_metric else [])
        if isinstance(train, tuple):
            chunks = ({"x": cx, "y": cy, "batch_size": ds.batch_size, "shuffle": False}
                      for cx, cy in _epochs_of_arrays(train[0], train[1], seed, epochs, ds.steps, ds.batch_size))
        elif ds.steps:
            chunks = iter([{"x": train.repeat(), "steps_per_epoch": ds.steps}])
        else:
            chunks = ({"x": train} for _ in range(epochs))
        total = 1 if ds.steps else epochs
        for k, fit_args in enumerate(chunks):
            hist = model.fit(**fit_args, epochs=1, verbose=0, callbacks=[history] + ([first] if k == 0 else []))
            rec.train_loss.append(float(hist.history["loss"][0]))
            rec.first_loss = first.value if rec.first_loss is None else rec.first_loss
            if isinstance(test, tuple):
                res = model.evaluate(test[0], test[1], batch_size=1024, verbose=0)
            else:
                res = model.evaluate(test, verbose=0)
            res = res if isinstance(res, (list, tuple)) else [res]
            rec.test_loss.append(float(res[0]))
            rec.test_accuracy.append(float(res[1]) if with_metric else float(res[0]))
            if on_epoch:
                on_epoch(k + 1, total)
    rec.skipped_steps = history.skipped_steps
    rec.seconds = time.perf_counter() - t0
    return rec


class TensorFlowParity:
    """:class:`ampkit.parity.ops.ParityOps` for TensorFlow/Keras (the flow: :mod:`ampkit.parity.driver`)."""

    def prepare_parity(self, data: ParityData, target) -> ParityData:
        if data.sets is None and isinstance(data.model, str):  # a built-in dataset: its arrays, images NCHW
            return dataclasses.replace(data, chance=of_targets(data.arrays.y_test, "accuracy", True))
        if data.sets is None:  # a caller's arrays (ampkit.parity(make_model, train, test)): as a data factory's
            a = data.arrays
            data = dataclasses.replace(data, source=DataSets(train=(a.x_train, a.y_train), test=(a.x_test, a.y_test),
                                                             spec="the train/test arrays"))
        return prepare(data)

    def train_seed(self, data: ParityData, mode: str, seed: int, target, *, epochs: int,
                   on_epoch=None) -> RunRecord:
        return train_one(data, mode, seed, epochs=epochs, on_epoch=on_epoch)
