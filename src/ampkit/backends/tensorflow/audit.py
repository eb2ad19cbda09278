"""ampkit audit for Keras: per-layer forward and gradient numerics against a float32 reference.

The model is built twice from its factory — under the float32 policy (the reference) and under
the mode's policy — with the same weights. An intermediate model exposes every layer's output as
it is produced; a GradientTape gives the gradient of the loss with respect to each of them.

Both passes run as training runs: ``training=True`` (BatchNormalization on batch statistics,
dropout on), with the SAME random numbers (:class:`.numerics.replay.MatchedRandomness`: seeding alone
does not give float16 and float32 layers the same dropout masks), from the same variables (the
reference copies the audited model's weights and moving statistics before each step), and the
audited model's non-trainable state (moving statistics) is put back after its pass, so the
training step that follows sees what it would have seen without the audit.

The relative error of a layer is norm-based, ``||audited - reference|| / max(||reference||, floor)``
(:func:`ampkit.compare.relative_error`, the rule of every audit path), over all of the layer's output
values. Functional and Sequential models are supported (subclassed models expose no per-layer
outputs), of Keras 3 or of Keras 2 (tf_keras):
each is audited and trained with its own Keras's mixed-precision API, and the fix for a layer is
given as code for that Keras (:func:`keras_fp32_hint`). The same tape gives every trainable variable's
gradient, what LossScaleOptimizer checks (:mod:`.numerics.params`); a forward failure is looked at inside
its layer, operation by operation (:mod:`.numerics.origin`).
"""

from __future__ import annotations

from functools import partial

import numpy as np

from ...audit.ops import Advice, AuditSession, StepOutcome, session_kind
from ...audit.report import LayerStats, merge_dtypes
from ...compare import array_relative_error as relative_error
from ...errors import UsageError
from ...formats import format_of, lost_below, precision_threshold
from .environment import import_tensorflow, tf_device_name, tf_environment
from .numerics.origin import composite, fp32_code, origin_of
from .numerics.params import ParamGrads, ParamLedger

#: Keras's LossScaleOptimizer's default initial_scale: an fp16 audit looks at what a default run sees
DEFAULT_LOSS_SCALE = 2.0**15


def keras_fp32_hint(name: str, flavor=None) -> str:
    """Python code keeping layer ``name`` of the user's ``model`` in float32 under a mixed policy
    (a statement for ``flavor``'s Keras: Keras 3 by default, tf_keras when given its Flavor)."""
    from .flavor import keras3

    return (flavor or keras3()).fp32_layer_code(name)


def layer_fp32_hint(model, flavor, name: str) -> str:
    """:func:`keras_fp32_hint`, for a layer holding sublayers every one of them (:func:`.numerics.origin.fp32_code`)."""
    try:
        lay = model.get_layer(name)
    except (ValueError, KeyError):
        lay = None
    return fp32_code(name, flavor, lay is not None and composite(lay))


def keras_scaler(flavor=None) -> str:
    """The loss scaler the audit's words are about: on Keras 3 ampkit's (``mp.optimizer``), whose skip
    reads an Embedding's sparse gradient row by row (Keras 3's own misses an inf row there,
    :mod:`.engine.scaling`); tf_keras's own LossScaleOptimizer checks those gradients densified."""
    from .flavor import keras3

    return "LossScaleOptimizer" if (flavor or keras3()).legacy else "ampkit's LossScaleOptimizer"


def keras_scale_code(scale: float, flavor=None) -> str:
    """Python code wrapping the user's ``optimizer`` in a LossScaleOptimizer starting at ``scale``: on
    Keras 3 ampkit's (:func:`keras_scaler`), on tf_keras its own."""
    from .flavor import keras3

    fl = flavor or keras3()
    if fl.legacy:
        return f"optimizer = tf_keras.mixed_precision.LossScaleOptimizer(optimizer, initial_scale={scale:g})"
    return f'optimizer = ampkit.keras.MixedPrecision("fp16", initial_scale={scale:g}).optimizer(optimizer)'


def _np(t) -> np.ndarray:
    tf = import_tensorflow()
    return tf.cast(t, tf.float32).numpy()


def _outputs_model(model):
    """The model's layers (Input layers left out), how many output tensors each has, a model
    returning all of those tensors, flat, in layer order, and where each layer's inputs come from."""
    from .flavor import flavor_of, keras3

    keras = (flavor_of(model) or keras3()).module
    layers = [lay for lay in model.layers if not isinstance(lay, keras.layers.InputLayer)]
    try:
        nodes = [_node_in(model, lay) for lay in layers]
        per_layer = [_flatten(_node_attribute(lay, i, "output")) for lay, i in zip(layers, nodes)]
        flat = [t for outs in per_layer for t in outs]
        sources = _input_sources(layers, nodes, per_layer, model.inputs)
        return layers, [len(outs) for outs in per_layer], keras.Model(model.inputs, flat), sources
    except Exception as exc:
        raise UsageError(f"the Keras audit needs a functional or Sequential model with an Input; "
                         f"{type(model).__name__} exposes no per-layer outputs ({type(exc).__name__}: {exc})")


def _node_in(model, layer):
    """``layer``'s call (its node) in ``model``'s graph: for a model used as a layer (a
    ``keras.applications`` backbone inside a transfer-learning model) its ``output`` property is its
    own graph's output, not connected to the outer inputs; the node of the outer call holds the outer
    tensors. Keras 3 keys the model's nodes ``f"{id(op)}_ib-{i}"``, tf_keras ``f"{name}_ib-{i}"``."""
    nodes = list(getattr(layer, "_inbound_nodes", None) or ())
    keys = getattr(model, "_nodes", None) or getattr(model, "_network_nodes", None) or ()
    mine = [n for i, n in enumerate(nodes) if f"{id(layer)}_ib-{i}" in keys or f"{layer.name}_ib-{i}" in keys]
    return mine[0] if len(mine) == 1 else None


def _node_attribute(layer, node, which: str):
    """``layer.output`` / ``layer.input`` as ``node`` (its call in the audited model) saw them."""
    return getattr(layer, which) if node is None else getattr(node, f"{which}_tensors")


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


def _input_sources(layers, nodes, per_layer_outputs, model_inputs) -> list:
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
    for lay, node in zip(layers, nodes):
        try:
            tensors = _flatten(_node_attribute(lay, node, "input"))
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
    return import_tensorflow().nest.flatten(x)


def _snapshot(model) -> list:
    return [(v, v.numpy()) for v in model.non_trainable_variables]


def _restore(saved) -> None:
    for v, value in saved:
        v.assign(value)


def _nonfinite(arrays) -> bool:
    return any(a is not None and not np.isfinite(a).all() for a in arrays)


def _grad_amax(grads, reduced: np.ndarray) -> float | None:
    """The largest float32 reference gradient, w.r.t. a layer's output or of a variable (``reduced``:
    :meth:`.numerics.params.ParamGrads.reduce`'s rows, amax first): what the back-off predicts from."""
    vals = [float(np.nanmax(np.abs(g))) for g in grads if g is not None and g.size]
    if len(reduced):
        vals.append(float(np.nanmax(reduced[:, 0])))
    return max(vals, default=None)


class KerasAuditSession(AuditSession):
    """:class:`ampkit.audit.ops.AuditSession` for a Keras model built twice by ``build_model``:
    under the float32 policy (the reference) and under the mode's, with the same weights."""

    initial_scale = DEFAULT_LOSS_SCALE

    def __init__(self, build_model, x, y, loss_fn, mode: str, *, lr: float = 1e-3, name: str | None = None,
                 seed: int = 0, notes: tuple[str, ...] = ()):
        from .engine.mixed_precision import MixedPrecision
        from .flavor import flavor_of, keras3, load_every_keras
        from .numerics.replay import MatchedRandomness

        self.x, self.y, self.loss_fn, self.mode, self.lr, self.seed = x, y, loss_fn, mode, lr, seed
        self.device, self.workload, self.notes = tf_device_name(), name, notes
        self.fmt = format_of(mode)
        self._engines = {}
        flavors = load_every_keras()  # the scopes below then set the policy in whichever Keras build_model uses
        self.mp_ref = MixedPrecision("fp32", keras="keras")
        for fl in flavors:  # tf_keras keeps a seed generator of its own: seeded too, the same model every run
            fl.module.utils.set_random_seed(seed)
        with self.mp_ref.scope():
            self.ref = build_model()
        with self._engine(self.initial_scale if mode == "fp16" else 1.0).scope():
            self.aud = build_model()
        self.flavor = flavor_of(self.aud) or keras3()
        self.aud.set_weights(self.ref.get_weights())
        ref_layers, ref_counts, self.ref_inter, _ = _outputs_model(self.ref)
        aud_layers, self.counts, self.aud_inter, self.sources = _outputs_model(self.aud)
        self.params, self.ref_params = ParamGrads(aud_layers, self.aud_inter), ParamGrads(ref_layers, self.ref_inter)
        if self.counts != ref_counts or len(self.params) != len(self.ref_params):
            raise UsageError("the model's factory built different models under float32 and the mode's policy; "
                             "the audit needs it to build the same model each time")
        self.ledger = ParamLedger(self.params)
        self.aud_layers, self.ref_layers = aud_layers, ref_layers
        self.names = [lay.name for lay in aud_layers]
        self.stats = {n: LayerStats(n, type(lay).__name__) for n, lay in zip(self.names, aud_layers)}
        self.rng = MatchedRandomness()
        self._step, self._ref_amax = None, None

    def _engine(self, scale: float):
        """The mode's engine at ``scale`` (a fresh one per scale keeps the loss scale where it was asked)."""
        from .engine.mixed_precision import MixedPrecision

        if scale not in self._engines:
            self._engines[scale] = MixedPrecision(self.mode, initial_scale=scale, keras="keras")
        return self._engines[scale]

    def _pass(self, model, engine, step_seed: int, scale: float | None, params) -> tuple[list, list, list, np.ndarray]:
        """A forward and backward as training runs, with this step's random draws, in ``engine``'s
        scope: outputs, gradients (of the loss times ``scale``, as LossScaleOptimizer scales it;
        None: the loss itself), the outputs' dtypes, and the variables' gradients reduced
        (:meth:`.numerics.params.ParamGrads.reduce`: amax and inf/NaN count each)."""
        tf = import_tensorflow()
        with self.rng.active():
            self.rng.start(step_seed)
            with engine.scope():
                with tf.GradientTape() as tape:
                    flat = _call(model, self.x)
                    loss = self.loss_fn(self.y, flat[-1])
                    loss = loss if scale is None else loss * scale
                grads = tape.gradient(loss, [*flat, *params.variables])
        n = len(flat)
        return ([_np(t) for t in flat], [None if g is None else _np(g) for g in grads[:n]], [t.dtype.name for t in flat],
                params.reduce(grads[n:], None if scale is None else self.ref_params.last, scale or 1.0))

    def measure(self, step: int, scale: float) -> StepOutcome:
        step_seed = self.seed * 7919 + step
        if self._step != step:  # the reference, once per step (a back-off retry reuses it)
            self.ref.set_weights(self.aud.get_weights())  # weights and moving statistics: both passes start alike
            # the reference runs with TF32 off, as fp32 means
            self.flat_r, self.grads_r, _, self.vars_r = self._pass(self.ref_inter, self.mp_ref, step_seed, None,
                                                                   self.ref_params)
            self._step, self._ref_amax = step, _grad_amax(self.grads_r, self.vars_r)
        before = _snapshot(self.aud)
        self.flat_a, self.grads_a, self.dtypes, self.vars_a = self._pass(self.aud_inter, self._engine(scale),
                                                                         step_seed, scale, self.params)
        _restore(before)  # the audit's pass updated moving statistics: the training step does that
        self.scale = scale
        self.ledger.saw(self.vars_a, scale)
        first = self._first(step_seed)
        params_bad = bool((self.vars_a[:, 1] > 0).any()) if len(self.params) else False
        ref_bad = _nonfinite(self.flat_r) or _nonfinite(self.grads_r) or bool((self.vars_r[:, 1] > 0).any())
        return StepOutcome(_nonfinite(self.flat_a), _nonfinite(self.grads_a) or params_bad, ref_bad, first,
                           params_nonfinite=params_bad, grad_amax=self._ref_amax)

    def _first(self, step_seed: int) -> dict | None:
        """Where the audited pass first held inf/NaN (:mod:`.numerics.origin` looks inside a forward's layer)."""
        outs_a, g_a = _split(self.flat_a, self.counts), _split(self.grads_a, self.counts)
        outs_r = _split(self.flat_r, self.counts)
        fwd = next((i for i, a in enumerate(outs_a) if _nonfinite(a)), None)
        if fwd is not None:
            return {"name": self.names[fwd], "phase": "forward", "op": None, "in_reference": _nonfinite(outs_r[fwd]),
                    **origin_of(self, fwd, step_seed)}
        # backward order: the last layer's gradient comes first; a layer's variables' after its output's
        for i in reversed(range(len(self.names))):
            bad = self.params.bad_names(self.vars_a, i)
            if _nonfinite(g_a[i]) or bad:
                first = {"name": self.names[i], "phase": "backward", "op": None,
                         "in_reference": bool(self.ref_params.bad_names(self.vars_r, i))
                         or _nonfinite(_split(self.grads_r, self.counts)[i])}
                return {**first, "param": bad[0]} if bad and not _nonfinite(g_a[i]) else first
        return None

    def rewind(self) -> None:
        """Nothing to undo: the audited pass put the model's state back and left no gradients."""

    def record(self) -> None:
        fmt, scale, lost_fwd, limit = self.fmt, self.scale, lost_below(self.fmt), precision_threshold(self.fmt)
        outs_r, outs_a = _split(self.flat_r, self.counts), _split(self.flat_a, self.counts)
        g_r, g_a = _split(self.grads_r, self.counts), _split(self.grads_a, self.counts)
        for n, kinds in zip(self.names, _split(self.dtypes, self.counts)):
            merge_dtypes(self.stats[n], kinds)
        for i, n in enumerate(self.names):
            r, a, st = outs_r[i], outs_a[i], self.stats[n]
            st.calls += 1
            absr = np.concatenate([np.abs(t).ravel() for t in r]) if r else np.zeros(0)
            st.fwd_amax = max(st.fwd_amax, float(np.nanmax(absr)) if absr.size else 0.0)
            nz = absr > 0
            st.count_forward(int(nz.sum()), int((nz & (absr < fmt.smallest_normal)).sum()),
                             int((nz & (absr < lost_fwd)).sum()))
            bad = sum(int((~np.isfinite(t)).sum()) for t in a)
            st.fwd_nonfinite += bad
            if not bad and np.isfinite(absr).all():
                st.rel_error = max(st.rel_error or 0.0, relative_error(a, r, fmt))
                src = self.sources[i]
                if st.rel_error > limit and src is not None:  # what error reaches it? (0 from the model's inputs)
                    got_a = [self.flat_a[j] for j in src if j >= 0]
                    got_r = [self.flat_r[j] for j in src if j >= 0]
                    err = relative_error(got_a, got_r, fmt) if got_r else 0.0
                    st.input_rel_error = max(st.input_rel_error or 0.0, err)
            gr = [g for g in g_r[i] if g is not None]
            if gr:
                g = np.concatenate([np.abs(t).ravel() for t in gr])
                st.grad_amax = max(st.grad_amax, float(np.nanmax(g)) if g.size else 0.0)
                gnz = g > 0
                st.count_grad(int(gnz.sum()), int((gnz & (g * scale < fmt.smallest_normal)).sum()),
                              int((gnz & (g * scale < lost_fwd)).sum()))
            st.grad_nonfinite += sum(int((~np.isfinite(t)).sum()) for t in g_a[i] if t is not None)
        self.ledger.record([self.stats[n] for n in self.names], self.vars_r, self.vars_a)

    def train(self, scale: float) -> None:
        # one training step in the mode (a fresh optimizer keeps the loss scale where it was asked);
        # a model without trainable variables (only dropout, say) has nothing to train
        if self.aud.trainable_variables:
            mp = self._engine(scale)
            with mp.scope():
                opt = mp.optimizer(self.flavor.module.optimizers.SGD(self.lr))
                mp.train_step(self.aud, opt, self.x, self.y, self.loss_fn)
        self._step = None

    def layers(self) -> list[LayerStats]:
        return [self.stats[n] for n in self.names]

    def advice(self) -> Advice:
        return Advice(partial(layer_fp32_hint, self.aud, self.flavor), keras_scaler(self.flavor), "initial_scale",
                      partial(keras_scale_code, flavor=self.flavor), 'mp = ampkit.keras.MixedPrecision("bf16")')

    def contract_findings(self) -> list:
        """A float16/bfloat16 output layer and float16 variables (:func:`.engine.contract.audit_findings`)."""
        from .engine.contract import audit_findings

        return audit_findings(self.aud, self.mode, partial(layer_fp32_hint, self.aud, self.flavor))

    def environment(self) -> dict:
        return tf_environment(self.flavor)

    def close(self) -> None:
        """The models were built for the audit: nothing of the caller's to give back."""


class TensorFlowAudit:
    """:class:`ampkit.audit.ops.AuditOps` for TensorFlow/Keras: the session of each kind is the
    ``audit_sessions`` table (:class:`.whatif.TensorFlowWhatIfAudit`), each opened as
    ``(build_model, x, y, loss_fn, mode, **kw)``."""

    def audit_session(self, config, target, live=None) -> KerasAuditSession:
        session = self.audit_sessions[session_kind(config)]
        if live is not None:
            from .flavor import flavor_of

            if not isinstance(live.model, type) and flavor_of(live.model) is not None:  # built once: one policy only
                raise UsageError(f"a Keras audit builds the model once per policy (float32 and the mode): pass a "
                                 f"zero-argument function that builds it, e.g. lambda: make_model(); received a built "
                                 f"{type(live.model).__name__}")
            if live.batch is None or not callable(live.loss_fn):
                raise UsageError("a Keras audit needs build_model (a zero-argument callable that builds the model), "
                                 "batch=(x, y) and loss_fn(y_true, y_pred), e.g. keras.losses.SparseCategoricalCrossentropy"
                                 "(from_logits=True)")
            x, y = live.batch
            return session(live.model, x, y, live.loss_fn, config.mode, lr=1e-3 if live.lr is None else live.lr,
                           name=live.name, seed=config.seed)
        from .audit_batch import session_inputs

        probe, build_model, x, y, loss, notes, fed = session_inputs(config)
        opened = session(build_model, x, y, loss, config.mode, lr=probe.lr, name=probe.name, seed=config.seed,
                         notes=notes)
        opened.input = fed
        return opened
