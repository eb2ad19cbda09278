"""TensorFlow test bodies, run by test_tensorflow.py in fresh interpreters (never the pytest process; the
Keras 3 ones of its SHARED list one after another in one child, each with its own verdict).

TensorFlow and PyTorch must not share the pytest process: once TensorFlow is loaded, torch
kernels can crash (their bundled native runtimes clash), so no test imports TensorFlow in-process.
"""

from __future__ import annotations

import warnings


def doctor_selftests():
    from ampkit.doctor import run_doctor

    rep = run_doctor("tensorflow")
    for mode in ("fp32", "fp16", "bf16"):
        m = rep.modes[mode]
        assert m.supported and m.selftest == "pass", (mode, m.selftest_detail)
        assert m.speedup is not None and m.speedup > 0
        if mode != "fp32":
            low, high = m.speedup_ci
            assert low <= m.speedup <= high and m.rounds >= 2
            # the screen look decides a many times slower mode on its matmul: no training step timed (#41)
            assert m.training_speedup is not None or (m.stopped == "decided: slower" and "not timed" in m.reason)
    assert "inf gradient skipped, scale 256 -> 128" in rep.modes["fp16"].selftest_detail
    assert "float32 output layer" in rep.modes["bf16"].selftest_detail
    assert rep.framework == "tensorflow"
    # a library call leaves TensorFlow's thread pools alone (only the ampkit program times on one thread)
    assert rep.environment["tf_threads"] == {"intra_op": 0, "inter_op": 0}


def parity_digits():
    from ampkit.parity.config import ParityConfig
    from ampkit.parity.driver import run

    # one seed of 5 epochs (about 0.94 in each mode here) instead of two of 4 (about 0.92): 15 epochs trained, not 24
    rep = run(ParityConfig(dataset="digits", modes=["fp32", "bf16", "fp16"], seeds=1, epochs=5), "tensorflow")
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


def training_runs_with_the_modes_tf32_setting():
    """fp32 means TF32 off: bench and parity train inside the mode's scope, so TensorFlow's
    default (TF32 on) never leaks into an fp32 row; tf32 would turn it on. Recorded at each step."""
    import keras
    import tensorflow as tf

    from ampkit.backends.tensorflow import parity
    from ampkit.bench.config import BenchConfig
    from ampkit.parity.datasets import load

    seen = []
    real_train, real_fit = keras.Model.train_on_batch, keras.Model.fit

    def train_on_batch(self, *a, **k):
        seen.append(("bench", tf.config.experimental.tensor_float_32_execution_enabled()))
        return real_train(self, *a, **k)

    def fit(self, *a, **k):
        seen.append(("parity", tf.config.experimental.tensor_float_32_execution_enabled()))
        return real_fit(self, *a, **k)

    keras.Model.train_on_batch, keras.Model.fit = train_on_batch, fit
    tf.config.experimental.enable_tensor_float_32_execution(True)  # TensorFlow's default
    row = _measure(BenchConfig(workload="mlp", steps=2, warmup=0, batch_size=8), "fp32", None)
    assert row.status == "ok", row.error
    parity.train_one(load("digits"), "fp32", 0, epochs=1)
    assert {who for who, _ in seen} == {"bench", "parity"}
    assert not any(on for _, on in seen), seen
    assert tf.config.experimental.tensor_float_32_execution_enabled()  # restored after the scope


# --- Keras 2 (tf_keras) ------------------------------------------------------------------------


def _tutorial_batches(steps=6, poison_at=2):
    """Batches for a 16-feature, 10-class model; batch ``poison_at`` holds an inf (an overflow to skip)."""
    import numpy as np

    rng = np.random.default_rng(0)
    batches = []
    for i in range(steps):
        x = rng.standard_normal((8, 16)).astype("float32")
        if i == poison_at:
            x[0, 0] = np.inf
        batches.append((x, rng.integers(0, 10, 8)))
    return batches


def keras2_tutorial_loop_matches_engine():
    """The TensorFlow tutorial's Keras 2 custom loop, as it teaches it (run with TF_USE_LEGACY_KERAS=1),
    and the same model through ampkit.keras.MixedPrecision: the same loss-scale sequence and weights."""
    import os

    import numpy as np
    import tensorflow as tf
    from tensorflow import keras
    from tensorflow.keras import layers, mixed_precision

    import ampkit.keras as ak

    assert os.environ.get("TF_USE_LEGACY_KERAS") == "1" and keras.Model.__module__.startswith("tf_keras"), keras.Model
    batches = _tutorial_batches()

    def build():
        keras.utils.set_random_seed(0)
        inputs = keras.Input(shape=(16,), name="digits")
        x = layers.Dense(32, activation="relu", name="dense_1")(inputs)
        x = layers.Dense(10, name="dense_logits")(x)
        outputs = layers.Activation("softmax", dtype="float32", name="predictions")(x)
        return keras.Model(inputs=inputs, outputs=outputs)

    # 1. the tutorial, verbatim apart from tiny loss-scale arguments (so 6 steps show growth and a halving)
    policy = mixed_precision.Policy("mixed_float16")
    mixed_precision.set_global_policy(policy)
    model = build()
    assert model.get_layer("dense_1").compute_dtype == "float16" and model.output.dtype == tf.float32
    optimizer = keras.optimizers.RMSprop()
    optimizer = mixed_precision.LossScaleOptimizer(optimizer, initial_scale=16, dynamic_growth_steps=2)
    loss_object = keras.losses.SparseCategoricalCrossentropy()

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            predictions = model(x)
            loss = loss_object(y, predictions)
            scaled_loss = optimizer.get_scaled_loss(loss)
        scaled_gradients = tape.gradient(scaled_loss, model.trainable_variables)
        gradients = optimizer.get_unscaled_gradients(scaled_gradients)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    tutorial = []
    for x, y in batches:
        train_step(x, y)
        tutorial.append(float(optimizer.loss_scale))
    tutorial_weights = model.get_weights()
    mixed_precision.set_global_policy("float32")

    # 2. the same model through ampkit: tf.keras resolves to tf_keras here, so that is its Keras
    mp = ak.MixedPrecision("fp16", initial_scale=16, dynamic_growth_steps=2)
    assert mp.flavor.name == "tf_keras", mp.flavor
    with mp.scope():
        assert mixed_precision.global_policy().name == "mixed_float16"
        model2 = build()
        opt2 = mp.optimizer(keras.optimizers.RMSprop())
    assert mixed_precision.global_policy().name == "float32"  # restored
    assert isinstance(opt2, mixed_precision.LossScaleOptimizer) and mp.check_model(model2) == []
    engine = []
    for x, y in batches:
        mp.train_step(model2, opt2, x, y, loss_object)
        engine.append(ak.loss_scale_of(opt2))
    assert tutorial == [16.0, 32.0, 16.0, 16.0, 32.0, 32.0], tutorial
    assert engine == tutorial, (engine, tutorial)
    for a, b in zip(tutorial_weights, model2.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)


def keras2_engine_scope_fit_callback():
    """ampkit.keras with keras=tf_keras (tf.keras is Keras 3 here): scope, optimizer wrapping,
    float32_output, fit with the loss-scale callback, train_step following the optimizer's Keras."""
    import keras
    import numpy as np
    import tensorflow as tf
    import tf_keras

    import ampkit.keras as ak
    from ampkit.errors import UsageError

    assert ak.MixedPrecision("bf16").flavor.name == "keras"  # what tf.keras resolves to without TF_USE_LEGACY_KERAS
    assert ak.MixedPrecision("bf16", keras=tf.keras).flavor.name == "keras"
    assert ak.MixedPrecision("bf16", keras="keras2").flavor.name == "tf_keras"
    try:
        ak.MixedPrecision("fp16", keras="keras4")
        raise AssertionError("keras='keras4' was accepted")
    except UsageError as exc:
        assert "tf_keras" in str(exc)
    mp = ak.MixedPrecision("fp16", initial_scale=2.0**4, dynamic_growth_steps=2, keras=tf_keras)
    assert mp.flavor.name == "tf_keras" and mp.flavor.label.startswith("tf_keras 2.")
    poison = tf.Variable(1.0, trainable=False)
    with mp.scope():
        assert tf_keras.mixed_precision.global_policy().name == "mixed_float16"
        assert keras.config.dtype_policy().name == "mixed_float16"  # the other Keras is loaded: set too
        tf_keras.utils.set_random_seed(0)
        inputs = tf_keras.Input((8,))
        h = tf_keras.layers.Dense(16, activation="relu")(inputs)
        model = tf_keras.Model(inputs, ak.float32_output(tf_keras.layers.Dense(3)(h)))
        opt = mp.optimizer(tf_keras.optimizers.SGD(0.01))
        assert isinstance(opt, tf_keras.mixed_precision.LossScaleOptimizer) and mp.optimizer(opt) is opt
        ce = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(optimizer=opt, loss=lambda y, p: ce(y, p) * poison)
    assert tf_keras.mixed_precision.global_policy().name == "float32" and keras.config.dtype_policy().name == "float32"
    assert model.layers[1].compute_dtype == "float16" and model.output.dtype == tf.float32
    assert mp.check_model(model) == []

    class Poison(tf_keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            poison.assign(float("inf") if batch == 2 else 1.0)

    history = mp.callback(model)
    assert isinstance(history, tf_keras.callbacks.Callback)
    x = np.random.default_rng(0).standard_normal((48, 8)).astype("float32")
    model.fit(x, np.arange(48) % 3, batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[Poison(), history])
    assert history.scales == [16.0, 32.0, 16.0, 16.0, 32.0, 32.0], history.scales
    assert history.skipped == [False, False, True, False, False, False] and history.skipped_steps == 1
    # a Keras 3 engine object drives a tf_keras optimizer with tf_keras's API (get_scaled_loss...)
    mp3 = ak.MixedPrecision("fp16", initial_scale=2.0**4, keras="keras")
    opt3 = mp3.optimizer(tf_keras.optimizers.SGD(0.01))
    assert isinstance(opt3, tf_keras.mixed_precision.LossScaleOptimizer)
    loss = mp3.train_step(model, opt3, x[:8], np.arange(8) % 3, ce)
    assert np.isfinite(float(loss)) and ak.loss_scale_of(opt3) == 16.0


def audit_keeps_the_steps_that_finished():
    """The stop request (Ctrl-C or SIGTERM of ampkit, relayed to the audit's process) lands during
    the first training step: that step finishes, the second never starts, the report says so."""
    import keras
    import numpy as np

    import ampkit
    from ampkit import isolation
    from ampkit.backends.tensorflow.engine.mixed_precision import MixedPrecision

    def build():
        return keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])

    x = np.random.default_rng(0).normal(size=(16, 6)).astype("float32")
    y = np.arange(16) % 3
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    real_train_step = MixedPrecision.train_step

    def train_step_then_stop(self, *args, **kwargs):
        out = real_train_step(self, *args, **kwargs)
        isolation._on_stop_request(None, None)  # what the STOP_SIGNAL handler does
        return out

    MixedPrecision.train_step = train_step_then_stop
    try:
        rep = ampkit.audit(build, (x, y), loss, framework="tensorflow", mode="bf16", steps=3)
    finally:
        MixedPrecision.train_step = real_train_step
    assert rep.interrupted is True and rep.completed == 1 and rep.steps == 3, rep.to_dict()
    assert [lay.calls for lay in rep.layers] == [1] * len(rep.layers) and rep.layers
    doc = rep.to_dict()
    assert doc["interrupted"] is True and doc["steps_completed"] == 1
    rep0 = ampkit.audit(build, (x, y), loss, framework="tensorflow", mode="bf16", steps=3)  # the flag is still set: no step
    assert rep0.completed == 0 and rep0.layers == [] and rep0.interrupted


def _measure(cfg, mode, flops):
    """One mode as a bench child measures it: the Keras session, the neutral row."""
    from ampkit.backends.tensorflow.backend import TensorFlowBackend
    from ampkit.bench.ops import MeasureRequest
    from ampkit.bench.session import measure_mode

    backend = TensorFlowBackend()
    return measure_mode(backend, MeasureRequest(cfg, mode, backend.target("cpu"), flops), None)
