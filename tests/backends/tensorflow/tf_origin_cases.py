"""Bodies of test_tf_origin.py (issue #34, Keras side), each run in a fresh interpreter: where a Keras
fp16 run fails (the custom layer and its operation; the upstream cause), the gradients a real
LossScaleOptimizer step checks (variables' gradients, checked against real steps on the same
batch), the float16 output layer, and batches that fit the model. Each body takes ``"keras"``
(Keras 3) or ``"tf_keras"`` (Keras 2); TensorFlow never loads in the pytest process."""

from __future__ import annotations

import ast
import importlib
import importlib.util

import numpy as np


def _k(flavor: str):
    return importlib.import_module(flavor)


def _policy(flavor: str, name: str) -> None:
    k = _k(flavor)
    k.mixed_precision.set_global_policy(name) if flavor == "tf_keras" else k.config.set_dtype_policy(name)


def _ce(flavor: str, logits: bool = True):
    return _k(flavor).losses.SparseCategoricalCrossentropy(from_logits=logits)


def lso_walk(flavor: str, model, x, y, loss_fn, scale: float, steps: int = 24) -> tuple[list, float, list]:
    """Real LossScaleOptimizer steps on one batch from ``scale`` until one is applied (or ``steps``):
    the scales it skipped at, the scale it applied the step at, the variables whose gradient was
    inf/NaN in its first step. The variables' gradients are read as the optimizer gets them."""
    import tensorflow as tf

    k = _k(flavor)
    inner = k.optimizers.SGD(1e-3)
    if flavor == "tf_keras":
        opt = k.mixed_precision.LossScaleOptimizer(inner, initial_scale=scale)
    else:
        opt = k.optimizers.LossScaleOptimizer(inner, initial_scale=scale)
    variables = model.trainable_variables
    if flavor != "tf_keras":
        opt.build(variables)
    skipped, first_bad = [], None
    for _ in range(steps):
        before = float(opt.loss_scale if flavor == "tf_keras" else opt.dynamic_scale)
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
            scaled = opt.get_scaled_loss(loss) if flavor == "tf_keras" else opt.scale_loss(loss)
        grads = tape.gradient(scaled, variables)
        bad = [getattr(v, "path", None) or v.name.split(":")[0] for g, v in zip(grads, variables)
               if not np.isfinite(np.asarray(g, dtype=np.float32)).all()]
        first_bad = bad if first_bad is None else first_bad
        if flavor == "tf_keras":
            opt.apply_gradients(zip(opt.get_unscaled_gradients(grads), variables))
        else:
            opt.apply(grads, variables)
        after = float(opt.loss_scale if flavor == "tf_keras" else opt.dynamic_scale)
        if after < before:
            assert bad, "LossScaleOptimizer skipped a step whose gradients this walk read as finite"
            skipped.append(before)
            continue
        assert not bad, f"LossScaleOptimizer applied a step with inf/NaN gradients: {bad[:3]}"
        return skipped, before, first_bad
    raise AssertionError(f"no step applied from scale {scale}")


# --- 1. the origin inside a custom layer ------------------------------------------------------------------


def _attention(flavor: str):
    """A custom layer whose own call computes unscaled scores q @ k^T between its sublayers: inputs of
    255 with identity q/k projections give scores of 8 * 255**2 = 5.2e5 > 65504, every sublayer's output finite."""
    import tensorflow as tf

    k = _k(flavor)

    class Attn(k.layers.Layer):
        def __init__(self, d=8, **kw):
            super().__init__(**kw)
            self.q, self.kk, self.o = k.layers.Dense(d, name="q"), k.layers.Dense(d, name="k"), k.layers.Dense(d, name="o")

        def call(self, x):
            q, kk = self.q(x), self.kk(x)
            p = tf.nn.softmax(tf.matmul(q, kk, transpose_b=True), axis=-1)
            return self.o(tf.matmul(p, q))

    def build():
        inp = k.Input((4, 8))
        h = k.layers.Flatten(name="flat")(Attn(name="attn")(inp))
        model = k.Model(inp, k.layers.Dense(3, name="head")(h))
        attn = model.get_layer("attn")
        for lay in (attn.q, attn.kk):
            lay.set_weights([np.eye(8, dtype="float32"), np.zeros(8, "float32")])
        return model

    rng = np.random.default_rng(0)
    x = np.full((4, 4, 8), 255.0, "float32") * np.sign(rng.standard_normal((4, 4, 8))).astype("float32")
    return build, x, rng.integers(0, 3, 4)


def custom_layer(flavor: str) -> None:
    """The real fp16 audit names the custom layer 'attn' (forward) and the matmul inside its call, with
    its inputs' range and float32's value; the finding's code, applied to a fresh mixed_float16 model,
    makes the step finite (the layer's policy alone does not: its float16 sublayers feed the matmul);
    --what-if --formats fp16 predicts the overflow at 'attn'."""
    import ampkit
    from ampkit.backends.tensorflow.flavor import get_flavor

    build, x, y = _attention(flavor)
    rep = ampkit.audit(build, (x, y), _ce(flavor), framework="tensorflow", mode="fp16")
    first = rep.first_nonfinite
    assert first["name"] == "attn" and first["phase"] == "forward", first
    assert "MatMul" in first["op"] and first["in_reference"] is False and "sublayer" not in first, first
    assert max(first["inputs_amax"]) == 255.0 and first["reference_amax"] > 65504, first
    found = [f for f in rep.findings if f.kind == "nonfinite"]
    assert found and found[0].layer == "attn" and found[0].code, rep.findings
    code = found[0].code
    ast.parse(code)
    assert "_flatten_layers()" in code, code

    def step_finite(fix: str | None) -> bool:
        _policy(flavor, "mixed_float16")
        try:
            model = build()
            if fix:
                exec(fix, {"model": model})
            out = np.asarray(model(x, training=True), dtype=np.float32)
            # then a real LossScaleOptimizer applies a step (after its usual back-off: the head's kernel
            # gradient, a sum over inputs of ~300, needs a scale of 256)
            return bool(np.isfinite(out).all()) and lso_walk(flavor, model, x, y, _ce(flavor), 2.0**15)[1] >= 1
        finally:
            _policy(flavor, "float32")
    assert step_finite(code), f"{code} leaves the fp16 step non-finite"
    assert not step_finite(get_flavor(flavor).fp32_layer_code("attn")), "the layer's own policy alone fixes it?"
    pred = ampkit.audit(build, (x, y), _ce(flavor), framework="tensorflow", what_if=True, formats=("fp16",)).what_if["fp16"]
    assert pred["first_overflow"] == "attn" and "attn" in pred["keep_in_fp32"], pred["first_overflow"]
    assert next(r for r in pred["modules"] if r["name"] == "attn")["fwd_amax"] > 65504  # its scores, not its output
    print(f"{flavor} custom layer: ok ({first['op']}, float32 {first['reference_amax']:.3g})")


# --- 3. advice that would work --------------------------------------------------------------------------


def upstream_cause(flavor: str) -> None:
    """A Rescaling ('blow') grows inputs of ~2 to ~6e37, finite in float32; the Dense after it ('mix', a
    kernel of ones) sums eight of them past float32's max, and the LayerNormalization after that gets inf.
    fp16 fails first at 'blow' (the cast of its 3e37 scale, an op of its own); the fp32 reference is
    non-finite too, first at 'mix'; the document names 'blow', whose float32 outputs grew, as the cause."""
    import ampkit

    k = _k(flavor)

    def build():
        inp = k.Input((8,))
        mix = k.layers.Dense(8, name="mix", kernel_initializer="ones")(k.layers.Rescaling(3e37, name="blow")(inp))
        return k.Model(inp, k.layers.Dense(3, name="head")(k.layers.LayerNormalization(name="ln")(mix)))

    rng = np.random.default_rng(0)
    x, y = (2 + np.abs(rng.standard_normal((8, 8))) * 0.5).astype("float32"), rng.integers(0, 3, 8)
    rep = ampkit.audit(build, (x, y), _ce(flavor), framework="tensorflow", mode="fp16")
    first = rep.first_nonfinite
    assert rep.reference_nonfinite and first["name"] == "blow" and first["in_reference"] is False, first
    assert first["reference_origin"] == {"name": "mix"}, first
    assert first["cause"]["name"] == "blow" and "float32 outputs reach" in first["cause"]["why"], first
    if importlib.util.find_spec("ampkit.audit.origin"):  # the neutral advice of issue #34 (audit/origin.py)
        text = " ".join(f.advice for f in rep.findings if f.kind != "contract")
        assert "run it in float32" not in text and "train in bf16" not in text, [f.advice for f in rep.findings]
        # the cause named: as the finding's "cause", or, where the first inf/NaN is at the cause itself, in its words
        assert any((f.cause or {}).get("name") == "blow" or (f.layer == "blow" and "float32 outputs reach" in f.advice)
                   for f in rep.findings), rep.findings
    print(f"{flavor} upstream cause: ok (fp16 first at blow by {first['op']}; {first['cause']['why']})")


# --- 5. every gradient a real step checks --------------------------------------------------------------


def kernel_gradient(flavor: str) -> None:
    """One Dense fed inputs of ~300 with a batch of 256: only its kernel's gradient (a sum over the batch)
    overflows fp16; activations and gradients w.r.t. outputs stay finite. The audit skips as a real
    LossScaleOptimizer does on the same batch, from 2**15 down to the same scale, names the kernel,
    and the what-if's range ends below the first skipped scale."""
    import ampkit

    k = _k(flavor)

    def build():
        inp = k.Input((16,))
        return k.Model(inp, k.layers.Dense(4, name="dense")(inp))

    rng = np.random.default_rng(0)
    x = (300 + rng.standard_normal((256, 16))).astype("float32")
    y = rng.integers(0, 4, 256)
    rep = ampkit.audit(build, (x, y), _ce(flavor), framework="tensorflow", mode="fp16")
    _policy(flavor, "mixed_float16")
    try:
        k.utils.set_random_seed(0)
        model = build()
    finally:
        _policy(flavor, "float32")
    model.set_weights(_built_weights(flavor, build))
    skipped, applied_at, bad = lso_walk(flavor, model, x, y, _ce(flavor), 2.0**15)
    assert skipped and rep.skipped_steps == len(skipped) and rep.loss_scale == applied_at, \
        (rep.skipped_steps, rep.loss_scale, skipped, applied_at)
    assert [b.split("/")[-1] for b in bad] == ["kernel"], bad
    dense = next(lay for lay in rep.layers if lay.name == "dense")
    assert dense.param_grad_overflow["params"][0].endswith("kernel") and dense.param_grad_amax > 65504 / 2.0**15, dense
    assert dense.fwd_nonfinite == 0 and dense.grad_nonfinite == 0 and rep.first_nonfinite is None
    assert dense.to_dict()["param_grad_amax"] == dense.param_grad_amax
    fixed = ampkit.audit(build, (x, y), _ce(flavor), framework="tensorflow", mode="fp16", loss_scale=2.0**15)
    assert fixed.first_nonfinite == {**fixed.first_nonfinite, "name": "dense", "phase": "backward"}, fixed.first_nonfinite
    assert fixed.first_nonfinite["param"].endswith("kernel") and fixed.layers[-1].param_grad_nonfinite > 0
    pred = ampkit.audit(build, (x, y), _ce(flavor), framework="tensorflow", what_if=True, formats=("fp16",)).what_if["fp16"]
    if pred["loss_scale_range"]:
        assert pred["loss_scale_range"][1] == applied_at, (pred["loss_scale_range"], applied_at)
    row = next(r for r in pred["modules"] if r["name"] == "dense")
    assert row["param_grad_overflow"] is True, row
    print(f"{flavor} kernel gradient: ok (skips {len(skipped)}, trains at {applied_at:g}, what-if {pred['loss_scale_range']})")


def harmless_underflow(flavor: str) -> None:
    """Half the batch weighs 1e-10 in the loss: its share of the gradients w.r.t. outputs is lost in fp16
    at 2**15 (over 5%: an underflow warning until now, "train in bf16" when no scale fits), yet the
    kernel gradients, sums over the batch dominated by the other half, are within fp16's precision of
    float32 (measured: param_grad_rel_error): the underflow is a note saying so, never "train in bf16".
    With the whole batch at 1e-10 the kernel gradients are lost too, and the warning stays."""
    import tensorflow as tf

    import ampkit

    k = _k(flavor)

    def build():
        inp = k.Input((16,))
        return k.Model(inp, k.layers.Dense(4, name="head")(k.layers.Dense(32, activation="relu", name="hidden")(inp)))

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((64, 16)).astype("float32"), rng.integers(0, 4, 64)
    ce = k.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def weighted(w):
        w = tf.constant(w, tf.float32)
        return lambda t, p: tf.reduce_mean(tf.cast(ce(t, p), tf.float32) * w)

    half = ampkit.audit(build, (x, y), weighted([1.0] * 32 + [1e-10] * 32), framework="tensorflow", mode="fp16", loss_scale=2.0**15)
    assert max(lay.grad_lost_frac for lay in half.layers) > 0.05, [lay.grad_lost_frac for lay in half.layers]
    errs = {lay.name: lay.param_grad_rel_error for lay in half.layers if lay.param_grad_amax}
    assert errs and all(e is not None and e < 0.031 for e in errs.values()), errs
    notes = [f for f in half.findings if f.kind == "underflow"]
    assert notes and all(f.level == "note" and "bf16" not in f.advice and "within" in f.advice for f in notes), \
        [(f.level, f.advice) for f in notes]
    assert not [f for f in half.findings if f.level != "note" and f.kind != "contract"], half.findings
    tiny = ampkit.audit(build, (x, y), weighted([1e-10] * 64), framework="tensorflow", mode="fp16", loss_scale=2.0**15)
    assert max(lay.param_grad_rel_error for lay in tiny.layers if lay.param_grad_amax) > 0.031
    assert [f for f in tiny.findings if f.kind == "underflow" and f.level == "warning"], tiny.findings
    print(f"{flavor} harmless underflow: ok (kernel gradients within {max(errs.values()):.2%} of float32)")


def _built_weights(flavor: str, build) -> list:
    """The weights ampkit.audit(seed=0) starts from (its float32 build after set_random_seed(0))."""
    k = _k(flavor)
    k.utils.set_random_seed(0)
    return build().get_weights()


def application(flavor: str = "keras") -> None:
    """keras.applications.ResNet50 (weights=None, 32x32, batch 8), checked against real LossScaleOptimizer
    steps on the same batch, both starting at 512 (2**15 takes 8 skips to get there, minutes on a CPU): a
    real run skips at 512 and 256 on conv1_conv's kernel gradient alone (every output and output gradient
    finite) and applies at 128; the audit skips the same steps, trains at the same scale and names
    conv1_conv/kernel, and names the float16 softmax head ('predictions') as a contract finding."""
    import ampkit
    from ampkit.backends.tensorflow import audit

    k = _k(flavor)

    def build():
        return k.applications.ResNet50(input_shape=(32, 32, 3), weights=None, classes=10)

    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 10, 8)
    loss = _ce(flavor, logits=False)
    weights = _built_weights(flavor, build)
    _policy(flavor, "mixed_float16")
    try:
        model = build()
    finally:
        _policy(flavor, "float32")
    model.set_weights(weights)
    skipped, applied_at, bad = lso_walk(flavor, model, x, y, loss, 512.0)
    # how far it backs off is the CPU's (fp16's rounding of the forward moves that gradient by a few percent:
    # 512, 256 then 128 on an AMX CPU; 512, 256, 128 then 64 on an AVX512 one): the audit must match the real run
    assert len(skipped) >= 1 and skipped == [512.0 / 2**i for i in range(len(skipped))], skipped
    assert applied_at == skipped[-1] / 2 and bad == ["conv1_conv/kernel"], (skipped, applied_at, bad)
    default, audit.KerasAuditSession.initial_scale = audit.KerasAuditSession.initial_scale, 512.0  # the walk's start
    try:
        rep = ampkit.audit(build, (x, y), loss, framework="tensorflow", mode="fp16")
    finally:
        audit.KerasAuditSession.initial_scale = default
    assert rep.skipped_steps == len(skipped) and rep.loss_scale == applied_at, (rep.skipped_steps, rep.loss_scale)
    assert rep.first_nonfinite is None and not any(lay.fwd_nonfinite or lay.grad_nonfinite for lay in rep.layers)
    overflowed = {lay.name: lay.param_grad_overflow for lay in rep.layers if lay.param_grad_overflow}
    assert overflowed == {"conv1_conv": {"params": ["conv1_conv/kernel"], "loss_scale": 512.0}}, overflowed
    conv = next(lay for lay in rep.layers if lay.name == "conv1_conv")
    assert conv.param_grad_amax > 65504 / 512, conv.param_grad_amax  # float32's value overflows at the start too
    assert max(lay.grad_amax for lay in rep.layers) * 512 < 65504  # no output gradient comes near
    head = [f for f in rep.findings if f.kind == "contract" and f.layer == "predictions"]
    assert head and "float16 compute" in head[0].advice and "dtype_policy = 'float32'" in head[0].code, head
    print(f"{flavor} ResNet50: ok (real and audit: skip at {skipped}, train at {applied_at:g}; conv1_conv/kernel)")


# --- 6. batches that fit the model ------------------------------------------------------------------------


def fitting_batches(flavor: str) -> None:
    """A bare model with an int32 input and an Embedding of 50 ids gets uniform valid ids (not N(0,1) cast
    to int: 68% zeros and negative ids); one starting with Rescaling(1/255) gets pixels in [0, 255]; a
    plain one N(0,1); the audit's document says what was fed ("input")."""
    from ampkit.audit.config import AuditConfig
    from ampkit.audit.driver import audit_here
    from ampkit.backends.tensorflow.workloads import bare_model_workload
    from ampkit.registry import get_backend

    k = _k(flavor)

    def tokens():
        inp = k.Input((12,), dtype="int32")
        h = k.layers.GlobalAveragePooling1D()(k.layers.Embedding(50, 8, name="emb")(inp))
        return k.Model(inp, k.layers.Dense(4, name="head")(h))

    def pixels():
        inp = k.Input((8, 8, 3))
        h = k.layers.Conv2D(4, 3, name="conv")(k.layers.Rescaling(1 / 255.0, name="rescale")(inp))
        return k.Model(inp, k.layers.Dense(4, name="head")(k.layers.Flatten()(h)))

    def plain():
        inp = k.Input((6,))
        return k.Model(inp, k.layers.Dense(4, name="head")(inp))

    work = bare_model_workload(tokens(), "m:tokens")
    x, _ = work.make_batch(64, 0)
    assert x.dtype == np.int32 and x.min() >= 0 and x.max() <= 49 and len(np.unique(x)) == 50, (x.min(), x.max())
    assert (x == 0).mean() < 0.1 and work.input["kind"] == "token_ids" and work.input["range"] == [0, 49]
    work = bare_model_workload(pixels(), "m:pixels")
    x, _ = work.make_batch(16, 0)
    assert work.input["range"] == [0, 255] and x.min() >= 0 and x.max() <= 255 and x.max() > 200, (x.min(), x.max())
    work = bare_model_workload(plain(), "m:plain")
    assert work.input["kind"] == "normal" and work.make_batch(4, 0)[0].min() < 0
    # the document: what the audit fed, through the CLI's own path (a module the factory spec names)
    import sys
    import types

    mod = types.ModuleType("fitcases")
    mod.tokens = tokens
    sys.modules["fitcases"] = mod
    rep = audit_here(AuditConfig(model="fitcases:tokens", mode="bf16", batch_size=8), get_backend("tensorflow"))
    doc = rep.to_dict()
    assert doc["input"]["kind"] == "token_ids" and doc["input"]["range"] == [0, 49], doc.get("input")
    assert "Embedding of 50 ids" in doc["note"], doc["note"]
    print(f"{flavor} fitting batches: ok ({doc['input']})")


def application_inputs(flavor: str = "keras") -> None:
    """keras.applications models with their preprocessing built in get pixels in [0, 255]: EfficientNetB0
    (Rescaling(1/255)); EfficientNetV2B0 (Rescaling(1/128, offset -1)); ResNet50 (none built in) N(0, 1)."""
    from ampkit.backends.tensorflow.workloads.inputs import input_plan

    k = _k(flavor)
    eff = k.applications.EfficientNetB0(input_shape=(32, 32, 3), weights=None, classes=10)
    assert input_plan(eff)["kind"] == "pixels" and input_plan(eff)["range"] == [0, 255], input_plan(eff)
    if hasattr(k.applications, "EfficientNetV2B0"):
        v2 = k.applications.EfficientNetV2B0(input_shape=(32, 32, 3), weights=None, classes=10)
        assert input_plan(v2)["kind"] == "pixels" and input_plan(v2)["range"][1] in (255, 256), input_plan(v2)
    res = k.applications.ResNet50(input_shape=(32, 32, 3), weights=None, classes=10)
    assert input_plan(res)["kind"] == "normal", input_plan(res)
    print(f"{flavor} application inputs: ok")
