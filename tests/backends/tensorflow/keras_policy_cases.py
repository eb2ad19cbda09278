"""The user's own global policy and the precision contract (issue #30 point 4, issue #22's Keras
half), run by test_keras_policy.py in a child process: Keras 3, or tf_keras under TF_USE_LEGACY_KERAS=1."""

from __future__ import annotations

import os
import sys
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _model(keras, out_dtype="float32"):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    h = keras.layers.Dense(8, name="hidden")(inputs)
    return keras.Model(inputs, keras.layers.Dense(2, dtype=out_dtype, name="logits")(h))


def _policy_lines(ak, make):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mp = make()
    return mp, [str(w.message) for w in caught if issubclass(w.category, ak.GlobalPolicyFound)]


def _keeps_gradients(np, keras, mp, model, opt):
    """A 1e-9-scaled loss still moves the float16 layer's weights (lr 1e6 makes a 1e-11 update visible)."""
    ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    x = np.linspace(-1, 1, 32, dtype="float32").reshape(8, 4)
    w0 = np.array(model.get_layer("hidden").kernel.numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mp.train_step(model, opt, x, np.arange(8) % 2, lambda t, p: ce(t, p) * 1e-9)
    return not np.array_equal(w0, np.array(model.get_layer("hidden").kernel.numpy()))


def tutorial_order():
    """The tutorial's global mixed_float16 first, then ampkit with auto, bf16 and fp16; models built
    inside and outside the scope."""
    import numpy as np
    import tensorflow as tf

    import ampkit.keras as ak

    legacy = os.environ.get("TF_USE_LEGACY_KERAS") == "1"
    keras = tf.keras  # Keras 3, or tf_keras under TF_USE_LEGACY_KERAS=1
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    for mode, want in (("auto", "fp16"), ("bf16", "bf16"), ("fp16", "fp16")):
        mp, lines = _policy_lines(ak, lambda mode=mode: ak.MixedPrecision(mode))
        assert len(lines) == 1 and "'mixed_float16'" in lines[0], lines
        assert mp.mode == want and mp.flavor.legacy == legacy, (mode, mp.mode, mp.flavor)
        assert {"auto": "adopts it", "bf16": "overrides it", "fp16": "matches it"}[mode] in lines[0], lines[0]
        for inside in (False, True):
            if inside:
                with mp.scope():
                    model = _model(keras)
            else:
                model = _model(keras)
            compute = model.get_layer("hidden").compute_dtype
            assert compute == ("bfloat16" if inside and want == "bf16" else "float16"), (mode, inside, compute)
            opt = mp.optimizer(keras.optimizers.SGD(1e6))
            assert _keeps_gradients(np, keras, mp, model, opt), (mode, inside, "mp.optimizer")
            # bf16 under the global mixed_float16: mp.optimizer wraps with loss scaling, health says so
            assert mp.health()["loss_scaling"] is True, (mode, inside, mp.health())
        # a plain optimizer on the float16 model built outside: train_step adds loss scaling, verify says so
        model = _model(keras)
        plain = keras.optimizers.SGD(1e6)
        found = mp.verify(model, optimizer=plain)
        assert [f["where"] for f in found if f["where"] == "optimizer"] == ["optimizer"], found
        assert _keeps_gradients(np, keras, mp, model, plain), (mode, "plain optimizer")
        print(mode, "ok", lines[0])
    tf.keras.mixed_precision.set_global_policy("float32")
    mp, lines = _policy_lines(ak, lambda: ak.MixedPrecision("bf16"))
    assert lines == [] and mp.global_policy_found is None
    print("no policy, no line")


def contract():
    """verify(): the unmodified model gives no finding, a float16 output layer exactly one naming it;
    the real keras.applications model too (its softmax output computes in float16 under a mixed policy)."""
    import numpy as np
    import tensorflow as tf

    import ampkit.keras as ak

    keras = tf.keras
    mp = ak.MixedPrecision("fp16")
    with mp.scope():
        good = _model(keras)
        good.compile(optimizer=mp.optimizer(keras.optimizers.SGD(0.1)), loss="mse")
        bad = _model(keras, out_dtype="float16")
        bad.compile(optimizer=mp.optimizer(keras.optimizers.SGD(0.1)), loss="mse")
    assert mp.verify(good) == [], mp.verify(good)
    (finding,) = mp.verify(bad)
    assert finding["where"] == "layer 'logits' (output)" and "float16" in finding["actual"], finding
    assert set(finding) == {"where", "expected", "actual", "advice"}
    print("planted ok", finding)
    # a model built outside mp.scope() computes in float32 throughout: the declared fp16 was never applied,
    # one finding for the model; one built in another mode's scope: only its layer, not the input layer
    (outside,) = mp.verify(_model(keras))
    assert outside["where"].startswith("model ") and "never applied" in outside["actual"], outside
    with ak.MixedPrecision("bf16").scope():
        other = _model(keras)
    assert [f["where"] for f in mp.verify(other)] == ["layer 'hidden'"], mp.verify(other)
    # train_step's bad arguments: one line, before Keras fails on them
    from ampkit.errors import UsageError

    x4, y4 = np.zeros((2, 4), "float32"), np.zeros((2,), "int64")
    sce = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    for args, word in (((good, "sgd", x4, y4, sce), "optimizer"), ((good, keras.optimizers.SGD(), x4, y4, "mse"),
                                                                    "loss_fn"), (("m", keras.optimizers.SGD(), x4, y4, sce), "model")):
        try:
            mp.train_step(*args)
        except UsageError as exc:
            assert word in str(exc) and "\n" not in str(exc), exc
        else:
            raise AssertionError(f"train_step took a bad {word}")
    for call, word in ((lambda: mp.verify("not a model"), "verify(model)"), (lambda: mp.verify(None), "verify(model)"),
                       (lambda: mp.verify(good, optimizer="adam"), "optimizer"),
                       (lambda: mp.optimizer("adam"), "optimizer(inner)"), (lambda: mp.optimizer(None), "optimizer(inner)"),
                       (lambda: mp.callback("x"), "callback(model)"),
                       (lambda: ak.MixedPrecision("fp16", initial_scale=-1.0), "initial_scale"),
                       (lambda: ak.MixedPrecision("fp16", initial_scale="a"), "initial_scale"),
                       (lambda: ak.MixedPrecision("fp16", dynamic_growth_steps=0), "dynamic_growth_steps")):
        try:
            call()
        except UsageError as exc:
            assert word in str(exc) and "\n" not in str(exc), exc
        else:
            raise AssertionError(f"{word} took a bad value")
    print("contract extras ok")
    # a layer given mixed_float16 itself in a float32 model: compile adds no loss scaling (the model's
    # policy is float32); verify says so and fit with the callback refuses in one line

    inputs = keras.Input((4,))
    odd = keras.Model(inputs, keras.layers.Dense(2, name="logits")(keras.layers.Dense(8, dtype="mixed_float16",
                                                                                      name="half")(inputs)))
    odd.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    assert [f["where"] for f in mp.verify(odd)] == ["optimizer"], mp.verify(odd)
    try:
        odd.fit(np.zeros((4, 4), "float32"), np.zeros((4, 2), "float32"), verbose=0, callbacks=[mp.callback(odd)])
    except UsageError as exc:
        assert "'half'" in str(exc) and "\n" not in str(exc), exc
    else:
        raise AssertionError("fit trained a float16 layer without loss scaling")
    print("fit refusal ok")
    _alarm(keras)


def _alarm(keras):
    """Every batch overflows: exactly one LossScaleWarning at step 3 (1-based) — the third skip in a row
    (consecutive_skip_warning=3; Keras 3's scale 4 -> 2 -> 1 -> 0.5 is also below 1.0 there, tf_keras
    keeps its scale at 1 and restarts its growth counter) — health 'collapsed', from the fit callback
    and from eager train_step; a healthy fit: none."""
    import numpy as np

    import ampkit
    import ampkit.keras as ak

    x = np.full((32, 4), 1e6, "float32")
    y = np.arange(32) % 2
    ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    for how in ("fit", "train_step", "healthy"):
        mp = ak.MixedPrecision("fp16", initial_scale=4.0, consecutive_skip_warning=3)
        with mp.scope():
            model = _model(keras)
            opt = mp.optimizer(keras.optimizers.SGD(0.1))
            model.compile(optimizer=opt, loss=ce)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if how == "train_step":
                for i in range(4):
                    mp.train_step(model, opt, x[i * 8:(i + 1) * 8], y[:8], ce)
            else:
                model.fit(x / 1e6 if how == "healthy" else x, y, batch_size=8, shuffle=False, verbose=0,
                          callbacks=[mp.callback(model)])
        alarms = [str(w.message) for w in caught if issubclass(w.category, ampkit.LossScaleWarning)]
        if how == "healthy":
            assert alarms == [] and mp.health()["status"] == "ok", (alarms, mp.health())
            continue
        assert len(alarms) == 1 and "collapsed at step 3" in alarms[0], (how, alarms)   # 1-based: the 3rd step
        # the audit first, bf16 only once the audit shows it healthy (as the torch engine's alarm says it)
        assert "Switch to bf16" not in alarms[0] and "--mode bf16` shows it healthy" in alarms[0], alarms[0]
        assert alarms[0].index("--mode fp16") < alarms[0].index("MixedPrecision('bf16')"), alarms[0]
        assert mp.health()["status"] == "collapsed" and mp.stats["skipped"] == 4, (how, mp.health())
    print("alarm ok")
    if os.environ.get("TF_USE_LEGACY_KERAS") == "1":
        return
    with mp.scope():
        net = keras.applications.MobileNetV3Small(input_shape=(32, 32, 3), weights=None, classes=3)
        net.compile(optimizer=mp.optimizer(keras.optimizers.Adam()), loss="sparse_categorical_crossentropy")
    (finding,) = mp.verify(net)
    assert finding["where"] == "layer 'predictions' (output)", finding
    net.get_layer("predictions").dtype_policy = "float32"
    assert mp.verify(net) == [], mp.verify(net)
    print("applications ok", finding["where"])


if __name__ == "__main__":
    for name in sys.argv[1:]:
        globals()[name]()
