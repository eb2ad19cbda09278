"""ampkit audit for Keras: per-layer forward and gradient numerics against a float32 reference.

The model is built twice from its factory — under the float32 policy (the reference) and under
the mode's policy — with the same weights. An intermediate model exposes every layer's output;
a GradientTape gives the gradient of the loss with respect to each of them. Layers run with
``training=False`` so that dropout draws do not make the two runs differ. Functional and
Sequential models are supported (subclassed models expose no per-layer outputs), of Keras 3 or of
Keras 2 (tf_keras): each is audited and trained with its own Keras's mixed-precision API.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...audit.core import (
    Advice,
    AuditConfig,
    AuditReport,
    LayerStats,
    audit_mode_for_auto,
    check_audit_args,
    findings_for,
    format_of,
)
from ...errors import UsageError
from ...isolation import stop_requested
from .common import import_tf, tf_device_name, tf_environment

#: Keras's LossScaleOptimizer's default initial_scale: an fp16 audit looks at what a default run sees
DEFAULT_LOSS_SCALE = 2.0**15


def keras_fp32_hint(name: str) -> str:
    """How to keep one layer in float32 under a mixed Keras policy."""
    return f"build layer {name!r} with dtype='float32'"


def _np(t) -> np.ndarray:
    tf = import_tf()
    return tf.cast(t, tf.float32).numpy()


def _outputs_model(model):
    from .flavor import flavor_of, keras3

    keras = (flavor_of(model) or keras3()).module
    layers = [lay for lay in model.layers if not isinstance(lay, keras.layers.InputLayer)]
    try:
        return layers, keras.Model(model.inputs, [lay.output for lay in layers])
    except Exception as exc:
        raise UsageError(f"the Keras audit needs a functional or Sequential model with an Input; "
                         f"{type(model).__name__} exposes no per-layer outputs ({type(exc).__name__}: {exc})")


def audit_keras(build_model, x, y, loss_fn, *, mode: str = "fp16", loss_scale: float | None = None,
                steps: int = 1, lr: float = 1e-3, name: str | None = None) -> AuditReport:
    """Audit a Keras model: ``build_model()`` is called once per policy (fp32 and ``mode``).

    ``build_model`` may build with Keras 3 or tf_keras (either gets the policy; the report's
    environment says which ran).
    """
    import keras

    from .flavor import flavor_of, keras3, load_every_keras
    from .keras_engine import MixedPrecision

    tf = import_tf()
    mode, scale = check_audit_args(mode, steps, loss_scale, DEFAULT_LOSS_SCALE)
    fmt = format_of(mode)
    load_every_keras()  # the scopes below then set the policy in whichever Keras build_model uses
    mp_ref, mp = MixedPrecision("fp32", keras="keras"), MixedPrecision(mode, initial_scale=scale, keras="keras")
    keras.utils.set_random_seed(0)
    with mp_ref.scope():
        ref = build_model()
    with mp.scope():
        aud = build_model()
    flavor = flavor_of(aud) or keras3()
    aud.set_weights(ref.get_weights())
    ref_layers, ref_inter = _outputs_model(ref)
    aud_layers, aud_inter = _outputs_model(aud)
    names = [lay.name for lay in aud_layers]
    stats = {n: LayerStats(n, type(lay).__name__) for n, lay in zip(names, aud_layers)}
    first_nonfinite, reference_nonfinite = None, False
    done = 0
    for step in range(steps):
        if stop_requested():  # Ctrl-C or SIGTERM of ampkit: keep the steps that finished
            break
        ref.set_weights(aud.get_weights())
        with mp_ref.scope():  # the reference runs with TF32 off, as fp32 means
            with tf.GradientTape() as tape:
                outs_r = ref_inter(x, training=False)
                loss_r = loss_fn(y, outs_r[-1])
            grads_r = tape.gradient(loss_r, outs_r)
        with mp.scope():
            with tf.GradientTape() as tape:
                outs_a = aud_inter(x, training=False)
                loss_a = loss_fn(y, outs_a[-1]) * scale  # the scaled loss, as LossScaleOptimizer scales it
            grads_a = tape.gradient(loss_a, outs_a)
        fwd_bad, bwd_bad = None, None
        for i, n in enumerate(names):
            r, a = _np(outs_r[i]), _np(outs_a[i])
            st = stats[n]
            st.calls += 1
            absr = np.abs(r)
            reference_nonfinite |= not np.isfinite(r).all()
            st.fwd_amax = max(st.fwd_amax, float(np.nanmax(absr)) if absr.size else 0.0)
            nz = absr > 0
            st.count_forward(nz.sum(), (nz & (absr < fmt.smallest_normal)).sum())
            bad = int((~np.isfinite(a)).sum())
            st.fwd_nonfinite += bad
            if bad and fwd_bad is None:
                fwd_bad = n
            if not bad and np.linalg.norm(r) > 0:
                st.rel_error = max(st.rel_error or 0.0, float(np.linalg.norm(a - r) / np.linalg.norm(r)))
            if grads_r[i] is not None:
                g = np.abs(_np(grads_r[i]))
                reference_nonfinite |= not np.isfinite(g).all()
                st.grad_amax = max(st.grad_amax, float(np.nanmax(g)) if g.size else 0.0)
                gnz = g > 0
                st.count_grad(gnz.sum(), (gnz & (g * scale < fmt.smallest_normal)).sum())
            if grads_a[i] is not None:
                gbad = int((~np.isfinite(_np(grads_a[i]))).sum())
                st.grad_nonfinite += gbad
        for i in reversed(range(len(names))):  # backward order: the last layer's gradient comes first
            if grads_a[i] is not None and stats[names[i]].grad_nonfinite:
                bwd_bad = names[i]
                break
        if first_nonfinite is None and (fwd_bad or bwd_bad):
            first_nonfinite = {"name": fwd_bad or bwd_bad, "phase": "forward" if fwd_bad else "backward", "step": step}
        # one training step in the mode (a fresh optimizer keeps the loss scale where it was asked)
        with mp.scope():
            opt = mp.optimizer(flavor.module.optimizers.SGD(lr))
            mp.train_step(aud, opt, x, y, loss_fn)
        done += 1
    layers = [stats[n] for n in names] if done else []
    for st in layers:
        st.finish(fmt)
    findings, suggested = findings_for(layers, fmt, mode, scale, first_nonfinite, reference_nonfinite,
                                       Advice(keras_fp32_hint, "LossScaleOptimizer", "initial_scale"))
    return AuditReport(mode, scale, layers, first_nonfinite, findings, tf_device_name(), steps, tf_environment(flavor),
                       name, reference_nonfinite, suggested, interrupted=stop_requested(), steps_completed=done)


def audit_from_config_tf(cfg: AuditConfig) -> AuditReport:
    from .workloads import build_tf_workload, check_tf_workload

    tf = import_tf()
    if cfg.mode == "auto":
        from ...cpu import auto_for_cpu
        from .keras_engine import resolve_auto_tf

        gpu = bool(tf.config.list_physical_devices("GPU")) and cfg.device != "cpu"
        mode, note = audit_mode_for_auto(resolve_auto_tf if gpu else auto_for_cpu)
        report = audit_from_config_tf(replace(cfg, mode=mode))
        report.resolved_from, report.note = "auto", note
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

    report = audit_keras(build, x, y, loss, mode=cfg.mode, loss_scale=cfg.loss_scale, steps=cfg.steps,
                         lr=probe.lr, name=probe.name)
    return report
