"""Child process of test_keras_watch.py: fit runs through ampkit.keras.MixedPrecision.callback(),
printed as one JSON line (TensorFlow stays out of the pytest process)."""

from __future__ import annotations

import json
import logging
import os
import sys
import warnings

import numpy as np

PLANT_FROM = 5


def planted_layer(k):
    class Planted(k.layers.Layer):
        """x * 1e6 from the PLANT_FROM-th training batch on (inf in float16)."""

        def __init__(self, **kw):
            super().__init__(**kw)
            self.n = self.add_weight(shape=(), initializer="zeros", trainable=False, dtype="float32", name="n")

        def call(self, x, training=None):
            if not training:
                return x
            self.n.assign_add(1.0)
            import tensorflow as tf

            f = tf.where(self.n >= PLANT_FROM, 1e6, 1.0)
            return x * tf.cast(f, x.dtype)
    return Planted


def run(flavor: str, mode: str, plant: bool, path: str) -> dict:
    import ampkit.keras

    k = __import__(flavor)
    mp = ampkit.keras.MixedPrecision(mode, keras=flavor)
    with mp.scope():
        layers = [k.layers.Dense(16, activation="relu")] + ([planted_layer(k)(name="planted")] if plant else []) + \
                 [k.layers.Dense(2, dtype="float32")]
        model = k.Sequential([k.Input((8,))] + layers)
        model.compile(optimizer=mp.optimizer(k.optimizers.SGD(0.01)),
                      loss=k.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = np.random.RandomState(0).randn(80, 8).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    own = []   # the optimizer's own scale after each batch, read apart from ampkit

    class Own(k.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            own.append(ampkit.keras.loss_scale_of(self.model.optimizer))
    cb = mp.callback(model, json_path=path)
    lines = []
    handler = logging.Handler()
    handler.emit = lambda rec: lines.append(rec.getMessage()) if rec.levelno >= logging.WARNING else None
    logger = logging.getLogger("ampkit.integrations")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.fit(x, y, batch_size=8, epochs=1, callbacks=[cb, Own()], verbose=0)
    finally:
        logger.removeHandler(handler)
    rec = cb.watch.record
    return {"summary": rec.summary(), "ledger": rec.ledger(), "own": own, "lines": lines,
            "warnings": [str(w.message) for w in caught if "ampkit" in str(w.message)]}


if __name__ == "__main__":
    out = sys.argv[1]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    res = {"keras_fp16": run("keras", "fp16", True, os.path.join(out, "keras_fp16.json")),
           "keras_bf16": run("keras", "bf16", False, os.path.join(out, "keras_bf16.json"))}
    try:
        import tf_keras  # noqa: F401
        res["tf_keras_fp16"] = run("tf_keras", "fp16", True, os.path.join(out, "tf_keras_fp16.json"))
    except ImportError:
        pass
    print("RESULT " + json.dumps(res))
