"""One worker of a two-process MultiWorkerMirroredStrategy on 127.0.0.1 (run by test_keras_multiworker.py):
fp16 custom loop, an overflow in worker 1's batch, then in worker 0's, then a clean step.

Prints ``worker I [(scale after, weights unchanged, weights finite), ...]`` for the three steps."""

from __future__ import annotations

import json
import os
import sys


def main(index: int, ports: list[str]) -> None:
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                          "task": {"type": "worker", "index": index}})
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf

    import ampkit.keras as ak

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    mp = ak.MixedPrecision("fp16", initial_scale=64.0)
    with strategy.scope(), mp.scope():
        keras.utils.set_random_seed(0)
        inputs = keras.Input((4,))
        model = keras.Model(inputs, keras.layers.Dense(2, dtype="float32")(keras.layers.Dense(8)(inputs)))
        opt = mp.optimizer(keras.optimizers.SGD(0.1))
    ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")

    def loss_fn(y, p):
        return ce(y, p) / 8.0  # the global batch: 4 per worker

    @tf.function
    def step(x, y):
        return strategy.run(mp.train_step, args=(model, opt, x, y, loss_fn))

    x = np.linspace(-1, 1, 16, dtype="float32").reshape(4, 4)
    y = np.arange(4) % 2
    out = []
    for bad_worker in (1, 0, None):
        xb = x.copy()
        if bad_worker == index:
            xb[1] = 1e6  # past float16's range in the first layer
        w0 = [v.numpy().copy() for v in model.trainable_variables]
        step(tf.constant(xb), tf.constant(y))
        w1 = [v.numpy().copy() for v in model.trainable_variables]
        out.append((float(opt.dynamic_scale.numpy()), all(np.array_equal(a, b) for a, b in zip(w0, w1)),
                    all(np.isfinite(w).all() for w in w1)))
    print("worker", index, out, flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2].split(","))
