"""Child process of test_keras_callback_origin.py: Keras 3 ``fit`` through ampkit.keras's callback on a model
whose custom attention layer's own ``q @ k^T`` overflows fp16 on the batches planted (5 and 6, or every one),
printed as one JSON line (TensorFlow stays out of the pytest process)."""

from __future__ import annotations

import json
import os
import sys

import numpy as np

STEPS = 8


def attention(k):
    import tensorflow as tf

    class Attn(k.layers.Layer):
        """q and k: the identity; on inputs of +-A each token's score with itself is 8 * A**2 (A=100: 8e4)."""

        def __init__(self, **kw):
            super().__init__(**kw)
            self.q = k.layers.Dense(8, use_bias=False, kernel_initializer="identity", name="q")
            self.k = k.layers.Dense(8, use_bias=False, kernel_initializer="identity", name="k")
            self.o = k.layers.Dense(8, name="o")

        def call(self, x):
            scores = tf.matmul(self.q(x), self.k(x), transpose_b=True)
            return self.o(tf.matmul(tf.nn.softmax(scores), x))
    return Attn


def run(planted, path: str) -> dict:
    import keras as k

    import ampkit.keras

    mp = ampkit.keras.MixedPrecision("fp16", keras="keras")
    with mp.scope():
        model = k.Sequential([k.Input((5, 8)), attention(k)(name="attn"), k.layers.GlobalAveragePooling1D(),
                              k.layers.Dense(2, dtype="float32")])
        model.compile(optimizer=mp.optimizer(k.optimizers.SGD(0.01)),
                      loss=k.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.RandomState(0)
    x = np.sign(rng.randn(8 * STEPS, 5, 8)).astype("float32") * 3
    for s in planted:
        x[(s - 1) * 8:s * 8] *= 100 / 3
    y = rng.randint(0, 2, 8 * STEPS).astype("int32")
    own = []

    class Own(k.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            own.append(ampkit.keras.loss_scale_of(self.model.optimizer))
    cb = mp.callback(model, json_path=path)
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, callbacks=[cb, Own()], verbose=0)
    rec = cb.watch.record
    return {"summary": rec.summary(), "ledger": rec.ledger(), "own": own, "findings": rec.findings}


if __name__ == "__main__":
    out = sys.argv[1]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    res = {"two": run((5, 6), os.path.join(out, "two.json")), "all": run(range(1, STEPS + 1), os.path.join(out, "all.json")),
           "clean": run((), os.path.join(out, "clean.json"))}
    print("RESULT " + json.dumps(res, default=str))
