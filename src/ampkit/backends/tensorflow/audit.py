"""ampkit audit for Keras: per-layer forward and gradient numerics against a float32 reference.

The model is built twice from its factory — under the float32 policy (the reference) and under
the mode's policy — with the same weights. An intermediate model exposes every layer's output as
it is produced; a GradientTape gives the gradient of the loss with respect to each of them.

Both passes run as training runs: ``training=True`` (BatchNormalization on batch statistics,
dropout on), with the SAME random numbers (:class:`.randomness.MatchedRandomness`: seeding alone
does not give float16 and float32 layers the same dropout masks), from the same variables (the
reference copies the audited model's weights and moving statistics before each step), and the
audited model's non-trainable state (moving statistics) is put back after its pass, so the
training step that follows sees what it would have seen without the audit.

The relative error of a layer is norm-based, ``||audited - reference|| / max(||reference||, floor)``
(:func:`relative_error`), over all of the layer's output values. Functional and Sequential models
are supported (subclassed models expose no per-layer outputs), of Keras 3 or of Keras 2 (tf_keras):
each is audited and trained with its own Keras's mixed-precision API, and the fix for a layer is
given as code for that Keras (:func:`keras_fp32_hint`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import partial

import numpy as np

from ...audit.core import (
    Advice,
    AuditConfig,
    AuditReport,
    LayerStats,
    audit_mode_for_auto,
    backoff_note,
    check_audit_args,
    findings_for,
    format_of,
    lost_below,
    precision_threshold,
)
from ...audit.core import relative_error as core_relative_error
from ...errors import UsageError
from ...formats import BF16, FloatFormat
from ...isolation import stop_requested
from .common import import_tf, tf_device_name, tf_environment

#: Keras's LossScaleOptimizer's default initial_scale: an fp16 audit looks at what a default run sees
DEFAULT_LOSS_SCALE = 2.0**15


def relative_error(audited, reference, fmt: FloatFormat = BF16) -> float:
    """``||audited - reference||_2 / max(||reference||_2, sqrt(n) * fmt.smallest_normal)`` over all
    values, in float64 (:func:`ampkit.audit.core.relative_error`: the floor keeps a zero reference
    finite). ``audited`` and ``reference`` are arrays, or lists of arrays (a layer with several
    outputs or inputs: the norms are taken over all of their values together)."""
    a_parts = audited if isinstance(audited, (list, tuple)) else [audited]
    r_parts = reference if isinstance(reference, (list, tuple)) else [reference]
    diff2 = ref2 = 0.0
    n = 0
    for a, r in zip(a_parts, r_parts):
        a = np.asarray(a, dtype=np.float64)
        r = np.asarray(r, dtype=np.float64)
        diff2 += float(np.sum((a - r) ** 2))
        ref2 += float(np.sum(r**2))
        n += r.size
    return core_relative_error(math.sqrt(diff2), math.sqrt(ref2), n, fmt)


def keras_fp32_hint(name: str, flavor=None) -> str:
    """Python code keeping layer ``name`` of the user's ``model`` in float32 under a mixed policy
    (a statement for ``flavor``'s Keras: Keras 3 by default, tf_keras when given its Flavor)."""
    from .flavor import keras3

    return (flavor or keras3()).fp32_layer_code(name)


def keras_scale_code(scale: float, flavor=None) -> str:
    """Python code wrapping the user's ``optimizer`` in a LossScaleOptimizer starting at ``scale``."""
    from .flavor import keras3

    fl = flavor or keras3()
    cls = "tf_keras.mixed_precision.LossScaleOptimizer" if fl.legacy else "keras.optimizers.LossScaleOptimizer"
    return f"optimizer = {cls}(optimizer, initial_scale={scale:g})"


def _np(t) -> np.ndarray:
    tf = import_tf()
    return tf.cast(t, tf.float32).numpy()


def _outputs_model(model):
    """The model's layers (Input layers left out), how many output tensors each has, a model
    returning all of those tensors, flat, in layer order, and where each layer's inputs come from."""
    from .flavor import flavor_of, keras3

    keras = (flavor_of(model) or keras3()).module
    layers = [lay for lay in model.layers if not isinstance(lay, keras.layers.InputLayer)]
    try:
        per_layer = [_flatten(lay.output) for lay in layers]
        flat = [t for outs in per_layer for t in outs]
        sources = _input_sources(layers, per_layer, model.inputs)
        return layers, [len(outs) for outs in per_layer], keras.Model(model.inputs, flat), sources
    except Exception as exc:
        raise UsageError(f"the Keras audit needs a functional or Sequential model with an Input; "
                         f"{type(model).__name__} exposes no per-layer outputs ({type(exc).__name__}: {exc})")


def _call(inter, x):
    """Run the intermediate model as training runs (a list for a one-input model: the structure it was
    built with); its outputs as a list (a model with one output returns the tensor itself)."""
    out = inter([x] if len(inter.inputs) == 1 and not isinstance(x, (list, tuple, dict)) else x, training=True)
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _split(flat, counts) -> list[list]:
    out, i = [], 0
    for c in counts:
        out.append(list(flat[i:i + c]))
        i += c
    return out


def _input_sources(layers, per_layer_outputs, model_inputs) -> list:
    """For each layer, where its inputs come from: a list of flat output indices (``-1``: a model
    input, the same tensor in both passes), or None when some input is not a captured layer output
    (a Keras 3 operation that is not a layer, a shared layer)."""
    index = {}
    i = 0
    for outs in per_layer_outputs:
        for t in outs:
            index[id(t)] = i
            i += 1
    inputs = {id(t) for t in model_inputs}
    sources = []
    for lay in layers:
        try:
            tensors = _flatten(lay.input)
        except Exception:  # several inbound nodes: no single input
            sources.append(None)
            continue
        src = []
        for t in tensors:
            if id(t) in inputs:
                src.append(-1)
            elif id(t) in index:
                src.append(index[id(t)])
            else:
                src = None
                break
        sources.append(src)
    return sources


def _flatten(x) -> list:
    return import_tf().nest.flatten(x)


def _snapshot(model) -> list:
    return [(v, v.numpy()) for v in model.non_trainable_variables]


def _restore(saved) -> None:
    for v, value in saved:
        v.assign(value)


def audit_keras(build_model, x, y, loss_fn, *, mode: str = "fp16", loss_scale: float | None = None,
                steps: int = 1, lr: float = 1e-3, name: str | None = None, seed: int = 0) -> AuditReport:
    """Audit a Keras model: ``build_model()`` is called once per policy (fp32 and ``mode``).

    ``build_model`` may build with Keras 3 or tf_keras (either gets the policy; the report's
    environment says which ran). Each step runs both models with ``training=True`` and the same
    random draws (seeded from ``seed`` and the step), then trains the audited one for one step.
    In fp16 without a given ``loss_scale``, the audit starts at LossScaleOptimizer's initial scale
    and, as LossScaleOptimizer does, halves it while only the scaled gradients overflow (the step
    is skipped); the report says so and audits the scale a default run trains at.
    """
    from .flavor import flavor_of, keras3, load_every_keras
    from .keras_engine import MixedPrecision
    from .randomness import MatchedRandomness

    tf = import_tf()
    scale_fixed = loss_scale is not None
    mode, scale = check_audit_args(mode, steps, loss_scale, DEFAULT_LOSS_SCALE)
    initial_scale, backoffs = scale, 0
    fmt = format_of(mode)
    lost_fwd, limit = lost_below(fmt), precision_threshold(fmt)
    flavors = load_every_keras()  # the scopes below then set the policy in whichever Keras build_model uses
    mp_ref, mp = MixedPrecision("fp32", keras="keras"), MixedPrecision(mode, initial_scale=scale, keras="keras")
    for fl in flavors:  # tf_keras keeps a seed generator of its own: seeded too, the same model every run
        fl.module.utils.set_random_seed(seed)
    with mp_ref.scope():
        ref = build_model()
    with mp.scope():
        aud = build_model()
    flavor = flavor_of(aud) or keras3()
    aud.set_weights(ref.get_weights())
    _, ref_counts, ref_inter, _ = _outputs_model(ref)
    aud_layers, counts, aud_inter, sources = _outputs_model(aud)
    if counts != ref_counts:
        raise UsageError("the model's factory built different models under float32 and the mode's policy; "
                         "the audit needs it to build the same model each time")
    names = [lay.name for lay in aud_layers]
    stats = {n: LayerStats(n, type(lay).__name__) for n, lay in zip(names, aud_layers)}
    rng = MatchedRandomness()
    first_nonfinite, reference_nonfinite = None, False
    done = 0

    def audited_pass(step_seed: int, at_scale: float, engine):
        """The mode's forward and backward (gradients of the loss scaled by ``at_scale``); the
        model's non-trainable state as it was before."""
        before = _snapshot(aud)
        with rng.active():
            rng.start(step_seed)
            with engine.scope():
                with tf.GradientTape() as tape:
                    flat = _call(aud_inter, x)
                    loss = loss_fn(y, flat[-1]) * at_scale  # the scaled loss, as LossScaleOptimizer scales it
                grads = tape.gradient(loss, flat)
        _restore(before)  # the audit's pass updated moving statistics: the training step does that
        dtypes[:] = [t.dtype.name for t in flat]
        return [_np(t) for t in flat], [None if g is None else _np(g) for g in grads]

    dtypes: list[str] = []  # the audited pass's output dtypes, in flat order

    def nonfinite(arrays) -> bool:
        return any(a is not None and not np.isfinite(a).all() for a in arrays)

    for step in range(steps):
        if stop_requested():  # Ctrl-C or SIGTERM of ampkit: keep the steps that finished
            break
        step_seed = seed * 7919 + step
        ref.set_weights(aud.get_weights())  # weights and moving statistics: both passes start alike
        with rng.active():
            rng.start(step_seed)
            with mp_ref.scope():  # the reference runs with TF32 off, as fp32 means
                with tf.GradientTape() as tape:
                    flat_r = _call(ref_inter, x)
                    loss_r = loss_fn(y, flat_r[-1])
                grads_r = tape.gradient(loss_r, flat_r)
        flat_r = [_np(t) for t in flat_r]
        grads_r = [None if g is None else _np(g) for g in grads_r]
        ref_bad = nonfinite(flat_r) or nonfinite(grads_r)
        while True:
            flat_a, grads_a = audited_pass(step_seed, scale, mp)
            # LossScaleOptimizer's own start: gradients that overflow only at the scale (forward and
            # fp32 reference finite) make it skip the step and halve the scale. Unless the scale was
            # given, the audit does the same and audits the scale a default run trains at.
            if (mode == "fp16" and not scale_fixed and nonfinite(grads_a) and not nonfinite(flat_a)
                    and not ref_bad and scale / 2 >= 1.0):
                scale /= 2
                backoffs += 1
                mp = MixedPrecision(mode, initial_scale=scale, keras="keras")
                continue
            break
        outs_r, outs_a = _split(flat_r, counts), _split(flat_a, counts)
        for n, kinds in zip(names, _split(dtypes, counts)):
            seen = set(stats[n].fwd_dtype.split(",")) if stats[n].fwd_dtype else set()
            stats[n].fwd_dtype = ",".join(sorted(seen | set(kinds)))
        g_r, g_a = _split(grads_r, counts), _split(grads_a, counts)
        fwd_bad, bwd_bad = None, None
        for i, n in enumerate(names):
            r, a = outs_r[i], outs_a[i]
            st = stats[n]
            st.calls += 1
            absr = np.concatenate([np.abs(t).ravel() for t in r]) if r else np.zeros(0)
            reference_nonfinite |= not np.isfinite(absr).all()
            st.fwd_amax = max(st.fwd_amax, float(np.nanmax(absr)) if absr.size else 0.0)
            nz = absr > 0
            st.count_forward(int(nz.sum()), int((nz & (absr < fmt.smallest_normal)).sum()),
                             int((nz & (absr < lost_fwd)).sum()))
            bad = sum(int((~np.isfinite(t)).sum()) for t in a)
            st.fwd_nonfinite += bad
            if bad and fwd_bad is None:
                fwd_bad = n
            if not bad and np.isfinite(absr).all():
                st.rel_error = max(st.rel_error or 0.0, relative_error(a, r, fmt))
                src = sources[i]
                if st.rel_error > limit and src is not None:  # what error reaches it? (0 from the model's inputs)
                    got_a = [flat_a[j] for j in src if j >= 0]
                    got_r = [flat_r[j] for j in src if j >= 0]
                    err = relative_error(got_a, got_r, fmt) if got_r else 0.0
                    st.input_rel_error = max(st.input_rel_error or 0.0, err)
            gr = [g for g in g_r[i] if g is not None]
            if gr:
                g = np.concatenate([np.abs(t).ravel() for t in gr])
                reference_nonfinite |= not np.isfinite(g).all()
                st.grad_amax = max(st.grad_amax, float(np.nanmax(g)) if g.size else 0.0)
                gnz = g > 0
                st.count_grad(int(gnz.sum()), int((gnz & (g * scale < fmt.smallest_normal)).sum()),
                              int((gnz & (g * scale < lost_fwd)).sum()))
            st.grad_nonfinite += sum(int((~np.isfinite(t)).sum()) for t in g_a[i] if t is not None)
        for i in reversed(range(len(names))):  # backward order: the last layer's gradient comes first
            if any(t is not None and not np.isfinite(t).all() for t in g_a[i]):
                bwd_bad = names[i]
                break
        if first_nonfinite is None and (fwd_bad or bwd_bad):
            first_nonfinite = {"name": fwd_bad or bwd_bad, "phase": "forward" if fwd_bad else "backward", "step": step}
        # one training step in the mode (a fresh optimizer keeps the loss scale where it was asked);
        # a model without trainable variables (only dropout, say) has nothing to train
        if aud.trainable_variables:
            with mp.scope():
                opt = mp.optimizer(flavor.module.optimizers.SGD(lr))
                mp.train_step(aud, opt, x, y, loss_fn)
        done += 1
    layers = [stats[n] for n in names] if done else []
    for st in layers:
        st.finish(fmt)
    findings, suggested = findings_for(layers, fmt, mode, scale, first_nonfinite, reference_nonfinite,
                                       Advice(partial(keras_fp32_hint, flavor=flavor), "LossScaleOptimizer",
                                              "initial_scale", partial(keras_scale_code, flavor=flavor),
                                              'mp = ampkit.keras.MixedPrecision("bf16")'))
    report = AuditReport(mode, scale, layers, first_nonfinite, findings, tf_device_name(), steps,
                         tf_environment(flavor), name, reference_nonfinite, suggested,
                         interrupted=stop_requested(), steps_completed=done)
    if backoffs:
        report.initial_loss_scale, report.skipped_steps = float(initial_scale), backoffs
        report.note = backoff_note("LossScaleOptimizer", initial_scale, scale, backoffs)
    return report


def audit_from_config_tf(cfg: AuditConfig) -> AuditReport:
    from .workloads import build_tf_workload, check_tf_workload

    tf = import_tf()
    if cfg.mode == "auto":
        from .keras_engine import resolve_auto_tf

        gpu = bool(tf.config.list_physical_devices("GPU")) and cfg.device != "cpu"
        mode, note = audit_mode_for_auto(lambda: resolve_auto_tf(cpu=not gpu))
        report = audit_from_config_tf(replace(cfg, mode=mode))
        report.resolved_from, report.note = "auto", note + (f"; {report.note}" if report.note else "")
        return report
    workload_name = None if cfg.model else check_tf_workload(cfg.workload or "mlp")
    probe = build_tf_workload(workload_name, cfg.model, cfg.input_shape, cfg.num_classes)
    bs = cfg.batch_size or probe.batch_size
    x, y = probe.make_batch(bs, cfg.seed)
    loss = probe.keras_loss()
    if isinstance(loss, str):
        loss = probe.flavor.module.losses.get(loss)

    def build():
        return build_tf_workload(workload_name, cfg.model, cfg.input_shape, cfg.num_classes).model

    try:
        return audit_keras(build, x, y, loss, mode=cfg.mode, loss_scale=cfg.loss_scale, steps=cfg.steps,
                           lr=probe.lr, name=probe.name, seed=cfg.seed)
    except UsageError:
        raise
    except Exception as exc:  # a user's model that fails under the audit: one line, as bench's probe says it
        if cfg.model:
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            raise UsageError(f"{cfg.model} failed under audit: {type(exc).__name__}: {first}") from exc
        raise


class TensorFlowAudit:
    """tensorflow/audit's operations for the neutral driver (being written: issue #21)."""
