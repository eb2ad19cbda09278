"""Child process of test_keras_callback_trackers.py (``KERAS_BACKEND`` set by the parent): Keras 3 fp16
``fit`` through ``ampkit.keras.MixedPrecision.callback()`` with a layer ``d1`` whose output is inf on
the 5th training batch only, 2 epochs of 5 batches, ``CSVLogger`` and (on TensorFlow)
``TensorBoard`` listed after the ampkit callback. Prints one JSON line."""

from __future__ import annotations

import json
import logging
import os
import sys

import numpy as np

PLANT_AT = 5


def main(out: str) -> dict:
    import keras
    from keras import ops

    import ampkit.keras

    class Planted(keras.layers.Layer):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.n = self.add_weight(shape=(), initializer="zeros", trainable=False, dtype="float32", name="n")

        def call(self, x, training=None):
            if not training:
                return x
            self.n.assign(self.n + 1.0)
            return x * ops.cast(ops.where(self.n == PLANT_AT, 1e6, 1.0), x.dtype)

    mp = ampkit.keras.MixedPrecision("fp16")
    with mp.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu", name="d0"),
                                  Planted(name="d1"), keras.layers.Dense(2, dtype="float32", name="out")])
        model.compile(optimizer=mp.optimizer(keras.optimizers.SGD(0.01)),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = np.random.RandomState(0).randn(40, 8).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    cb = mp.callback(model, json_path=os.path.join(out, "run.json"))
    backend = keras.backend.backend()
    trackers = [keras.callbacks.CSVLogger(os.path.join(out, "log.csv"))]
    try:
        import tensorboard  # noqa: F401  (keras.callbacks.TensorBoard writes through it)
        with_tb = backend == "tensorflow"
    except ImportError:
        with_tb = False
    if with_tb:
        trackers.append(keras.callbacks.TensorBoard(os.path.join(out, "tb"), update_freq="epoch"))
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda rec: lines.append(rec.getMessage()) if rec.levelno >= logging.WARNING else None
    logging.getLogger("ampkit.integrations").addHandler(handler)
    hist = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, callbacks=[cb, *trackers], verbose=0)
    tags: dict[str, list] = {}
    if with_tb:
        import tensorflow as tf

        for root, _d, files in os.walk(os.path.join(out, "tb", "train")):
            for f in files:
                for ev in tf.compat.v1.train.summary_iterator(os.path.join(root, f)):
                    for v in ev.summary.value:
                        if "amp/" in v.tag:
                            tags.setdefault(v.tag, []).append(float(tf.make_ndarray(v.tensor)))
    return {"backend": backend, "lines": lines, "scales": cb.scales, "skipped": cb.skipped,
            "history": {k: v for k, v in hist.history.items() if k.startswith("amp/")}, "tb": tags if with_tb else None}


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    print("RESULT " + json.dumps(main(sys.argv[1])))
