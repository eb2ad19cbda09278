"""TensorFlow test bodies, each run in a fresh interpreter by test_tensorflow.py.

TensorFlow and PyTorch must not share the pytest process: once TensorFlow is loaded, torch
kernels can crash (their bundled native runtimes clash), so no test imports TensorFlow in-process.
"""

from __future__ import annotations

import warnings


def doctor_selftests():
    from ampkit.backends.tensorflow import doctor

    rep = doctor.run()
    for mode in ("fp32", "fp16", "bf16"):
        m = rep.modes[mode]
        assert m.supported and m.selftest == "pass", (mode, m.selftest_detail)
        assert m.speedup is not None and m.speedup > 0
        if mode != "fp32":
            low, high = m.speedup_ci
            assert low <= m.speedup <= high and m.rounds >= 2 and m.training_speedup is not None
    assert "inf gradient skipped, scale 256 -> 128" in rep.modes["fp16"].selftest_detail
    assert "float32 output layer" in rep.modes["bf16"].selftest_detail
    assert rep.framework == "tensorflow"


def parity_digits():
    from ampkit.backends.tensorflow.parity import run_parity_tf
    from ampkit.parity.core import ParityConfig

    rep = run_parity_tf(ParityConfig(dataset="digits", modes=["fp32", "bf16", "fp16"], seeds=3, epochs=10))
    assert [r.mode for r in rep.results] == ["fp32", "bf16", "fp16"]
    for r in rep.results:
        assert r.metric["mean"] >= 0.9, (r.mode, r.metric)
    assert rep.framework == "tensorflow"


def callback_history():
    import keras
    import numpy as np
    import tensorflow as tf

    import ampkit.keras as ak

    before = keras.config.dtype_policy().name
    mp = ak.MixedPrecision("fp16", initial_scale=2.0**4, dynamic_growth_steps=2)
    poison = tf.Variable(1.0, trainable=False)
    with mp.scope():
        assert keras.config.dtype_policy().name == "mixed_float16"
        keras.utils.set_random_seed(0)
        inputs = keras.Input((8,))
        h = keras.layers.Dense(16, activation="relu")(inputs)
        out = keras.layers.Dense(3, dtype="float32")(h)
        model = keras.Model(inputs, out)
        assert model.layers[1].compute_dtype == "float16" and model.layers[1].variable_dtype == "float32"
        ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(optimizer=mp.optimizer(keras.optimizers.SGD(0.01)), loss=lambda y, p: ce(y, p) * poison)
    assert keras.config.dtype_policy().name == before  # restored

    class Poison(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            poison.assign(float("inf") if batch == 2 else 1.0)

    history = mp.callback()
    x = np.random.default_rng(0).standard_normal((48, 8)).astype("float32")
    y = np.arange(48) % 3
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[Poison(), history])
    assert history.scales == [16.0, 32.0, 16.0, 16.0, 32.0, 32.0]
    assert history.skipped == [False, False, True, False, False, False] and history.skipped_steps == 1


def last_layer_warns():
    import keras

    import ampkit.keras as ak

    mp = ak.MixedPrecision("fp16")
    with mp.scope():
        inputs = keras.Input((4,))
        model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        problems = mp.check_model(model)
    assert problems and any("computes in float16" in str(w.message) for w in caught)
    with mp.scope():
        inputs = keras.Input((4,))
        model = keras.Model(inputs, ak.float32_output(keras.layers.Dense(2)(inputs)))
    assert mp.check_model(model) == []
