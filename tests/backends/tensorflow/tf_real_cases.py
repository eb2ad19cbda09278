"""The Keras audit on real models, the bodies run by test_tf_audit_real.py in fresh interpreters (those
of one Keras flavor one after another in one child, whichever test they belong to, each seeding and
setting its own policies).

(TensorFlow never loads in the pytest process: see tf_cases.py.) Each body takes the Keras to use,
``"keras"`` (Keras 3) or ``"tf_keras"`` (Keras 2), as its one argument.
"""

from __future__ import annotations

import ast
import importlib
import math

import numpy as np

#: the relative error's floor (an RMS): the format's smallest normal, restated — the test computes the error itself
FLOOR = {"bf16": 2.0**-126, "fp16": 2.0**-14}


def _keras(flavor: str):
    return importlib.import_module(flavor)


def _set_policy(flavor: str, name: str) -> None:
    k = _keras(flavor)
    if flavor == "tf_keras":
        k.mixed_precision.set_global_policy(name)
    else:
        k.config.set_dtype_policy(name)


def _mobilenet(flavor: str):
    k = _keras(flavor)
    return k.applications.MobileNetV2(input_shape=(32, 32, 3), weights=None, classes=10, alpha=0.35)


def _flavor_obj(flavor: str):
    from ampkit.backends.tensorflow.flavor import get_flavor

    return get_flavor(flavor)


def _independent_rel_errors(flavor: str, factory, mode: str, x) -> dict:
    """Per-layer ||a - r|| / max(||r||, floor * sqrt(n)) of a float32 and a mixed model with the same
    weights, both run with training=True (no random layer in these models), computed here without the audit."""
    k = _keras(flavor)
    k.utils.set_random_seed(0)  # as ampkit.audit(seed=0) builds: the same initial weights
    _set_policy(flavor, "float32")
    ref = factory()
    _set_policy(flavor, {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}[mode])
    aud = factory()
    _set_policy(flavor, "float32")
    aud.set_weights(ref.get_weights())
    errors = {}
    outs = []
    for model in (ref, aud):
        layers = [lay for lay in model.layers if not isinstance(lay, k.layers.InputLayer)]
        inter = k.Model(model.inputs, [lay.output for lay in layers])
        outs.append([np.asarray(k.ops.cast(t, "float32") if flavor == "keras" else t.numpy().astype("float32"),
                                dtype=np.float64) for t in inter([x], training=True)])
    names = [lay.name for lay in aud.layers if not isinstance(lay, k.layers.InputLayer)]
    for name, r, a in zip(names, *outs):
        errors[name] = float(np.linalg.norm((a - r).ravel())
                             / max(np.linalg.norm(r.ravel()), FLOOR[mode] * math.sqrt(r.size)))
    return errors


def mobilenet_audit(flavor: str, mode: str) -> None:
    """MobileNetV2 (32x32, 10 classes, alpha 0.35, weights=None) audited in ``mode`` as it trains:
    its softmax gets from_logits=False; no overflow, underflow or non-finite finding (fp16: at the
    scale LossScaleOptimizer backs off to from its 2**15, which overflows the gradients; at a fixed
    2**15 the audit says so, as gradient overflow with the scale's code); each layer's relative error
    as an independent computation gives it; every finding's code and every layer's fp32 hint parse."""
    import ampkit
    from ampkit.backends.tensorflow.audit import keras_fp32_hint
    from ampkit.backends.tensorflow.workloads import bare_model_workload

    fl = _flavor_obj(flavor)
    _keras(flavor).utils.set_random_seed(0)  # unseeded, some initial weights give near-uniform softmax outputs
    work = bare_model_workload(_mobilenet(flavor), "mnv2")
    assert work.input_shape == (32, 32, 3) and work.num_classes == 10, (work.input_shape, work.num_classes)
    assert work.loss == "sparse_categorical_crossentropy" and work.from_logits is False
    assert work.flavor.name == flavor
    x, y = work.make_batch(8, 0)
    loss = work.keras_loss()
    # the loss the workload picked, on the model's softmax outputs, is cross-entropy of the probabilities
    probs = np.asarray(work.model(x, training=True), dtype=np.float64)  # batch statistics: not uniform
    hand = float(np.mean(-np.log(probs[np.arange(8), y])))
    assert abs(float(loss(y, probs.astype("float32"))) - hand) < 1e-4 * max(1.0, hand), (float(loss(y, probs)), hand)
    assert abs(hand - float(work.flavor.sparse_ce_logits()(y, probs.astype("float32")))) > 0.05  # logits would differ

    from ampkit.audit import driver

    backed_off, real_back_off = [], driver.back_off

    def counting(session, step, s, outcome, max_finite, say=lambda s, o: None):
        return real_back_off(session, step, s, outcome, max_finite, lambda s, o: (backed_off.append(s), say(s, o)))

    driver.back_off = counting
    try:
        rep = ampkit.audit(lambda: _mobilenet(flavor), (x, y), loss, framework="tensorflow", mode=mode, steps=1)
    finally:
        driver.back_off = real_back_off
    bad = [(f.kind, f.layer, f.advice) for f in rep.findings if f.kind in ("overflow", "underflow", "nonfinite")]
    assert not bad and rep.first_nonfinite is None and not rep.reference_nonfinite, (mode, bad[:3])
    assert len(rep.layers) == 155 and all(lay.rel_error is not None for lay in rep.layers)
    if mode == "fp16":  # LossScaleOptimizer's start: 2**15 overflows the gradients, halved until they fit
        assert rep.initial_loss_scale == 2.0**15 and rep.skipped_steps >= 1, rep.to_dict()["note"]
        assert rep.loss_scale == 2.0**15 / 2**rep.skipped_steps and "LossScaleOptimizer" in rep.note
        # predicted from the float32 gradients' amax, not stepped down: the scale above the one it settles
        # at measured (it skips) and that one, a halving between them when the prediction is one short
        assert backed_off[-2:] == [2 * rep.loss_scale, rep.loss_scale] and len(backed_off) <= 3, backed_off
    # the first layer is within a few rounding units of float32, not "100% underflow"
    assert rep.layers[0].rel_error < (0.01 if mode == "bf16" else 0.002), rep.layers[0]
    assert max(lay.fwd_lost_frac for lay in rep.layers) < 0.05
    assert max(lay.grad_lost_frac for lay in rep.layers) < 0.05
    mine = _independent_rel_errors(flavor, lambda: _mobilenet(flavor), mode, x)
    assert len(mine) == len(rep.layers)  # in order (auto-named layers differ in their suffix)
    for want, lay in zip(mine.values(), rep.layers):
        assert abs(lay.rel_error - want) <= 1e-3 * want + 1e-7, (mode, lay.name, lay.rel_error, want)
    for f in rep.findings:
        if f.code is not None:
            assert "`" not in f.code
            ast.parse(f.code)
    for lay in rep.layers:
        ast.parse(keras_fp32_hint(lay.name, fl))
    print(flavor, mode, "max rel_error", max(lay.rel_error for lay in rep.layers), "findings", len(rep.findings),
          sorted({f.kind for f in rep.findings}), "loss scale", rep.loss_scale)

    if mode != "fp16":
        return
    # at a fixed 2**15, fp16 overflows in the backward (what bench's skipped steps show), and says so
    rep = ampkit.audit(lambda: _mobilenet(flavor), (x, y), loss, framework="tensorflow", mode="fp16", loss_scale=2.0**15, steps=1)
    assert rep.loss_scale == 2.0**15 and rep.first_nonfinite and rep.first_nonfinite["phase"] == "backward"
    assert max(lay.fwd_amax for lay in rep.layers) < 100  # the forward is nowhere near fp16's range
    over = [f for f in rep.findings if f.kind == "overflow"]
    # w.r.t. outputs, or a parameter's own gradient (a kernel's, a sum over the batch: what the scaler checks)
    assert over and all("gradients w.r.t. its output" in f.advice or "'s parameter" in f.advice for f in over), \
        [f.advice for f in over][:3]
    assert not [f for f in rep.findings if f.kind == "underflow"]
    codes = [f.code for f in over if f.code]
    want = "LossScaleOptimizer(optimizer, initial_scale=" if flavor == "tf_keras" else \
        'ampkit.keras.MixedPrecision("fp16", initial_scale='  # ampkit's: Keras 3's own misses sparse infs
    assert codes and all(want in c for c in codes), codes[:2]
    for c in codes:
        ast.parse(c)


def dropout_masks_match(flavor: str) -> None:
    """A model that is only Dropout (and one with GaussianNoise and SpatialDropout1D): both passes draw the
    same masks, so the audited error is 0 (inputs exact in fp16/bf16) and the noise only rounds; without
    matching, TensorFlow's masks for float16 and float32 inputs with the same seed are unrelated."""
    import tensorflow as tf

    import ampkit
    from ampkit.backends.tensorflow.numerics import replay as randomness

    k = _keras(flavor)
    seed = tf.constant([1, 2], tf.int32)
    ones = tf.ones((1, 4000))
    m32 = tf.nn.experimental.stateless_dropout(ones, 0.5, seed=seed) > 0
    m16 = tf.cast(tf.nn.experimental.stateless_dropout(tf.cast(ones, tf.float16), 0.5, seed=seed), tf.float32) > 0
    assert float(tf.reduce_mean(tf.cast(m32 != m16, tf.float32))) > 0.3  # why seeding alone is not enough

    kept = []
    real = randomness.MatchedRandomness.dropout

    def recording(self, inputs, rate, noise_shape=None):
        out = real(self, inputs, rate, noise_shape)
        kept.append(np.asarray(tf.cast(out, tf.float32)) != 0)
        return out

    randomness.MatchedRandomness.dropout = recording
    try:
        def only_dropout():
            inputs = k.Input((32,))
            return k.Model(inputs, k.layers.Dropout(0.5, name="drop")(inputs))

        rng = np.random.default_rng(0)
        x = (rng.integers(-16, 16, (8, 32)) / 4).astype("float32")  # exact in fp16 and bf16
        x[x == 0] = 0.25
        y = rng.integers(0, 32, 8)
        loss = k.losses.SparseCategoricalCrossentropy(from_logits=True)
        for mode in ("bf16", "fp16"):
            kept.clear()
            rep = ampkit.audit(only_dropout, (x, y), loss, framework="tensorflow", mode=mode,
                               loss_scale=1.0 if mode == "fp16" else None, steps=2)
            assert [lay.name for lay in rep.layers] == ["drop"]
            assert rep.layers[0].rel_error == 0.0, (mode, rep.layers[0])
            # two steps x (reference, audited) passes; each pass drops about half, the pair the same,
            # and the second step draws a new mask
            assert len(kept) == 4, len(kept)
            assert 0.3 < kept[0].mean() < 0.7
            assert (kept[0] == kept[1]).all() and (kept[2] == kept[3]).all() and not (kept[0] == kept[2]).all()

        def noisy():
            inputs = k.Input((16, 8))
            h = k.layers.GaussianNoise(1.0, name="noise")(inputs)
            h = k.layers.SpatialDropout1D(0.5, name="sdrop")(h)
            h = k.layers.Flatten(name="flat")(h)
            return k.Model(inputs, k.layers.Dropout(0.3, name="drop")(h))

        x3 = (rng.integers(-16, 16, (8, 16, 8)) / 4).astype("float32")
        y3 = rng.integers(0, 128, 8)
        for mode, tol in (("bf16", 1e-2), ("fp16", 1e-3)):
            rep = ampkit.audit(noisy, (x3, y3), loss, framework="tensorflow", mode=mode, loss_scale=1.0 if mode == "fp16" else None)
            errs = {lay.name: lay.rel_error for lay in rep.layers}
            assert errs["noise"] < tol and errs["drop"] < tol, (mode, errs)  # noise rounds; masks equal
    finally:
        randomness.MatchedRandomness.dropout = real
    # the patches are gone: a layer draws with its own generator again
    assert randomness.MatchedRandomness.dropout is real


def batchnorm_state_as_training_sees_it(flavor: str) -> None:
    """BatchNormalization in training mode: the audit's passes leave the moving statistics as one
    training step leaves them (one momentum update per step, not three)."""
    import ampkit

    k = _keras(flavor)
    built = []

    def build():
        inputs = k.Input((6,))
        h = k.layers.Dense(6, name="d")(inputs)
        h = k.layers.BatchNormalization(momentum=0.5, name="bn")(h)
        m = k.Model(inputs, k.layers.Dense(3, name="head")(h))
        built.append(m)
        return m

    rng = np.random.default_rng(0)
    x = (rng.standard_normal((16, 6)) * 3 + 5).astype("float32")
    y = rng.integers(0, 3, 16)
    loss = k.losses.SparseCategoricalCrossentropy(from_logits=True)
    ampkit.audit(build, (x, y), loss, framework="tensorflow", mode="bf16", steps=1, lr=0.0)
    aud = built[1]
    bn = aud.get_layer("bn")
    batch_mean = np.asarray(aud.get_layer("d")(x)).astype(np.float64).mean(0)
    moving = np.asarray(bn.moving_mean).astype(np.float64)
    # one update with momentum 0.5 from 0: half the batch mean (three would be 7/8 of it)
    np.testing.assert_allclose(moving, 0.5 * batch_mean, rtol=0.03, atol=0.03)


def fp32_hint_keeps_layer_fp32(flavor: str) -> None:
    """The hint is code: run on the user's ``model`` it makes that layer compute in float32 (its output
    dtype, and values equal to a float32 matmul), the others staying in the mixed dtype."""
    from ampkit.backends.tensorflow.audit import keras_fp32_hint, keras_scale_code

    k = _keras(flavor)
    fl = _flavor_obj(flavor)
    for policy, low in (("mixed_float16", "float16"), ("mixed_bfloat16", "bfloat16")):
        _set_policy(flavor, policy)
        k.utils.set_random_seed(0)
        inputs = k.Input((64,))
        h = k.layers.Dense(32, name="mid-layer")(inputs)
        h = k.layers.Dense(16, name="after")(h)
        model = k.Model(inputs, h)
        _set_policy(flavor, "float32")
        code = keras_fp32_hint("mid-layer", fl)
        assert "`" not in code
        ast.parse(code)
        exec(code, {"model": model})
        mid = model.get_layer("mid-layer")
        assert mid.compute_dtype == "float32" and model.get_layer("after").compute_dtype == low, code
        inter = k.Model(model.inputs, [mid.output, model.get_layer("after").output])
        x = (1.0 + np.random.default_rng(0).standard_normal((4, 64)) * 1e-3).astype("float32")
        got, after = inter([x])
        assert got.dtype.name == "float32" and after.dtype.name == low, (got.dtype, after.dtype)
        kernel, bias = [np.asarray(w, dtype=np.float64) for w in mid.get_weights()]
        want = x.astype(np.float64) @ kernel + bias
        err = np.linalg.norm(np.asarray(got, np.float64) - want) / np.linalg.norm(want)
        assert err < 1e-5, (policy, err)  # float32 arithmetic, not a 2**-8 / 2**-11 rounding of the input
        # the same code on a real model's layer
        _set_policy(flavor, policy)
        net = _mobilenet(flavor)
        _set_policy(flavor, "float32")
        exec(keras_fp32_hint("Conv1", fl), {"model": net})
        assert net.get_layer("Conv1").compute_dtype == "float32"
        # the loss-scale finding's code runs too: the user's optimizer wrapped, starting at that scale
        space = {flavor: k, "optimizer": k.optimizers.SGD(0.01), "ampkit": __import__("ampkit.keras")}
        exec(keras_scale_code(2048.0, fl), space)
        assert fl.is_loss_scale_optimizer(space["optimizer"])
        assert fl.loss_scale(space["optimizer"]) == 2048.0
        out = k.Model(net.inputs, net.get_layer("Conv1").output)([np.zeros((1, 32, 32, 3), "float32")])
        assert out.dtype.name == "float32"


def planted_cancellation_found(flavor: str) -> None:
    """A layer computing (x + 1e4) - 1e4 on values of order 1: in fp16 and bf16 the sum keeps no bit
    of x, so that layer's relative error is ~1 and a precision finding names it; the layers before it
    stay within rounding."""
    import ampkit

    k = _keras(flavor)

    def build():
        inputs = k.Input((16,))
        h = k.layers.Dense(16, name="pre")(inputs)
        h = k.layers.Lambda(lambda t: (t + 1e4) - 1e4, name="cancel")(h)
        return k.Model(inputs, k.layers.Dense(4, name="head")(h))

    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16)).astype("float32")
    y = rng.integers(0, 4, 8)
    loss = k.losses.SparseCategoricalCrossentropy(from_logits=True)
    for mode in ("bf16", "fp16"):
        rep = ampkit.audit(build, (x, y), loss, framework="tensorflow", mode=mode)
        errs = {lay.name: lay.rel_error for lay in rep.layers}
        assert errs["cancel"] > 0.5 and errs["pre"] < 0.02, (mode, errs)
        found = [f for f in rep.findings if f.kind == "precision" and f.layer == "cancel"]
        assert found, (mode, [(f.kind, f.layer) for f in rep.findings])
        for f in found:
            assert f.code is None or ast.parse(f.code)


def model_heads(flavor: str) -> None:
    """Loss, classes and input shape read from the model: softmax (activation, Softmax layer, a Lambda
    whose outputs sum to 1) -> from_logits=False; sigmoid -> binary cross-entropy; linear -> logits;
    flags that contradict the model are usage errors; an unbuilt Sequential needs --input-shape."""
    import tensorflow as tf

    from ampkit.backends.tensorflow.workloads import bare_model_workload
    from ampkit.errors import UsageError

    k = _keras(flavor)

    def functional(last, units=5):
        inputs = k.Input((7,))
        return k.Model(inputs, last(k.layers.Dense(units)(inputs)))

    inputs = k.Input((7,))
    dense_softmax = k.Model(inputs, k.layers.Dense(5, activation="softmax")(inputs))
    expect = [
        (dense_softmax, "sparse_categorical_crossentropy", 5),
        (functional(k.layers.Softmax()), "sparse_categorical_crossentropy", 5),
        (functional(k.layers.Activation("softmax")), "sparse_categorical_crossentropy", 5),
        (functional(k.layers.Lambda(lambda t: tf.nn.softmax(t))), "sparse_categorical_crossentropy", 5),
        (functional(k.layers.Activation("sigmoid"), units=1), "binary_crossentropy", 2),
        (functional(k.layers.Activation("sigmoid"), units=3), "binary_crossentropy", 3),
        (functional(lambda t: t), "sparse_categorical_crossentropy_logits", 5),
        (functional(lambda t: t, units=1), "binary_crossentropy_logits", 2),
        (functional(k.layers.Activation("relu")), "sparse_categorical_crossentropy_logits", 5),
    ]
    for i, (model, loss, classes) in enumerate(expect):
        w = bare_model_workload(model, f"case{i}")
        assert (w.loss, w.num_classes, w.input_shape) == (loss, classes, (7,)), (i, w.loss, w.num_classes)
        x, y = w.make_batch(4, 0)
        out = model(x)
        value = float(w.keras_loss()(y, out))  # targets fit the loss and the output
        assert np.isfinite(value), (i, value)
        model.compile(optimizer=k.optimizers.SGD(0.0), loss=w.keras_loss())
        model.train_on_batch(x, y)
    # the flags: agreeing ones are accepted, contradicting ones are one-line usage errors
    assert bare_model_workload(dense_softmax, "m", (7,), 5).num_classes == 5
    assert bare_model_workload(dense_softmax, "m", None, None).num_classes == 5  # no flag: the model's
    for shape, classes, words in (((8,), 5, "--input-shape 8 contradicts"), ((7, 1), 5, "--input-shape 7,1"),
                                  ((7,), 4, "--num-classes 4 contradicts"), (None, 10, "--num-classes 10 contradicts")):
        try:
            bare_model_workload(dense_softmax, "m", shape, classes)
            raise AssertionError(f"{shape} {classes} accepted")
        except UsageError as exc:
            assert words in str(exc) and "\n" not in str(exc), str(exc)
    seq = k.Sequential([k.layers.Dense(4), k.layers.Softmax()])
    try:
        bare_model_workload(seq, "seq")
        raise AssertionError("an unbuilt Sequential without --input-shape was accepted")
    except UsageError as exc:
        assert "--input-shape" in str(exc)
    w = bare_model_workload(k.Sequential([k.layers.Dense(4), k.layers.Softmax()]), "seq", (3,))
    assert (w.loss, w.num_classes, w.input_shape) == ("sparse_categorical_crossentropy", 4, (3,)), w
    # a partially declared input shape takes a compatible flag
    inputs = k.Input((None, 3))
    ragged = k.Model(inputs, k.layers.Dense(2)(k.layers.GlobalAveragePooling1D()(inputs)))
    assert bare_model_workload(ragged, "r", (5, 3)).input_shape == (5, 3)
    try:
        bare_model_workload(ragged, "r")
        raise AssertionError("a partially declared shape was accepted without --input-shape")
    except UsageError as exc:
        assert "?,3" in str(exc)


def bench_application_without_flags(flavor: str) -> None:
    import os
    import sys
    import tempfile

    from ampkit.backends.tensorflow import bench
    from ampkit.bench.config import BenchConfig

    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "apps_mod.py"), "w") as fh:
            fh.write(f"import {flavor}\n"
                     "def mnv2():\n"
                     f"    return {flavor}.applications.MobileNetV2(input_shape=(32, 32, 3), weights=None, "
                     "classes=10, alpha=0.35)\n")
        sys.path.insert(0, tmp)
        cfg = BenchConfig(model="apps_mod:mnv2", steps=1, warmup=0, batch_size=4)
        probe = bench.probe(cfg.to_dict())  # trains a probe step: shapes and loss fit
        flops, name, ran = probe.flops_per_sample, probe.name, probe.environment["keras"]
        assert name == "apps_mod:mnv2" and ran.startswith({"keras": "Keras ", "tf_keras": "tf_keras "}[flavor])
        assert flops and flops > 0 and probe.batch_size > 0
        row = _measure(cfg, "fp32", flops)
        assert row.status == "ok", row.error
        # softmax outputs taken as probabilities: about ln(10) on random targets, not a loss on logits
        assert 1.0 < row.final_loss < 6.0, row.final_loss


def _measure(cfg, mode, flops):
    """One mode as a bench child measures it: the Keras session, the neutral row."""
    from ampkit.backends.tensorflow.backend import TensorFlowBackend
    from ampkit.bench.ops import MeasureRequest
    from ampkit.bench.session import measure_mode

    backend = TensorFlowBackend()
    return measure_mode(backend, MeasureRequest(cfg, mode, backend.target("cpu"), flops), None)
