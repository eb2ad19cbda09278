"""ampkit parity for Keras: the same datasets, splits, seeds and statistics as PyTorch."""

from __future__ import annotations

import time

from ..convergence.core import ParityConfig, ParityReport, RunRecord, _loader_order, resolve_modes, summarize
from .common import import_tf, tf_device_name, tf_environment


def _keras_model(name: str):
    import keras

    if name == "digits":
        inputs = keras.Input((64,))
        h = keras.layers.Dense(128, activation="relu")(inputs)
        h = keras.layers.Dense(128, activation="relu")(h)
    else:  # mnist5k: the same small CNN as the PyTorch side, channels last
        inputs = keras.Input((28, 28, 1))
        h = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inputs)
        h = keras.layers.MaxPooling2D()(h)
        h = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(h)
        h = keras.layers.MaxPooling2D()(h)
        h = keras.layers.Flatten()(h)
    out = keras.layers.Dense(10, dtype="float32", name="logits")(h)  # logits stay float32
    return keras.Model(inputs, out)


def train_one_tf(ds, mode: str, seed: int, *, epochs: int, on_epoch=None) -> RunRecord:
    import keras

    from ..keras.engine import MixedPrecision

    mp = MixedPrecision(mode)
    keras.utils.set_random_seed(seed)  # the same initial weights in every mode
    with mp.scope():
        model = _keras_model(ds.name)
        model.compile(optimizer=mp.optimizer(keras.optimizers.AdamW(ds.lr)),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    x, y = ds.x_train.numpy(), ds.y_train.numpy()
    xte, yte = ds.x_test.numpy(), ds.y_test.numpy()
    if x.ndim == 4:  # NCHW (PyTorch) -> NHWC (Keras)
        x, xte = x.transpose(0, 2, 3, 1), xte.transpose(0, 2, 3, 1)
    history = mp.callback()
    rec = RunRecord(mode, seed, [], [], [], 0, 0.0)
    t0 = time.perf_counter()
    for epoch in range(epochs):
        order = _loader_order(len(x), seed, epoch).numpy()  # the same data order as PyTorch's parity
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


def run_parity_tf(cfg: ParityConfig, progress=None) -> ParityReport:
    from ..convergence.datasets import load
    from ..keras.engine import mode_support_tf

    cfg.validate()
    import_tf()
    ds = load(cfg.dataset)
    modes = resolve_modes(cfg.modes, mode_support_tf, "in TensorFlow here")
    epochs = cfg.epochs or ds.epochs
    t0 = time.perf_counter()
    records = []
    for seed in range(cfg.seeds):
        for mode in modes:
            cb = (lambda d, t, _m=mode, _s=seed: progress(_m, _s, d, t)) if progress else None
            records.append(train_one_tf(ds, mode, seed, epochs=epochs, on_epoch=cb))
    results = summarize(records, modes, cfg.tolerance)
    return ParityReport(ds.name, tf_device_name(), results, tf_environment(), cfg.tolerance, epochs,
                        framework="tensorflow", elapsed_s=round(time.perf_counter() - t0, 3))
