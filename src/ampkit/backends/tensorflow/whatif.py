"""``ampkit audit --what-if`` for Keras (3 or tf_keras): float32 training steps with per-layer summaries.

The model is built once, under the float32 policy. Each step runs it as training runs
(``training=True``, the audit's matched random draws per step), takes the gradient of the loss
w.r.t. every layer's output and the trainable variables in one tape, summarizes each layer's
output and output gradient, and the input of every Dense/EinsumDense (what Keras 3's float8
quantizes), then applies SGD. The same tape gives every trainable variable's gradient: its amax is
the owning layer's ``param_grad_amax`` (what LossScaleOptimizer checks: a kernel gradient, a sum over
the batch, sets the top of the loss-scale range where it exceeds every output gradient). A custom
layer's own code is replayed with its operations recorded (:func:`.numerics.origin.inner_amax`): its
``fwd.amax`` is the largest of its output and the tensors its ``call`` computes between its
sublayers, so unscaled attention scores that overflow fp16 are predicted at that layer.
Summaries are the neutral :func:`ampkit.audit.whatif_summary.summarize`, the PyTorch backend's too,
with rounding and fp8 quantization as ``ml_dtypes`` round trips (float16, bfloat16, float8_e4m3fn,
float8_e5m2). Nothing of a tensor is kept past its summary.
"""

from __future__ import annotations

import math
from functools import partial
from types import MappingProxyType

import ml_dtypes
import numpy as np

from ...audit.ops import Advice, WhatIfSession
from ...summaries import ModuleSummary, TensorSummary
from ...summaries import summarize as summarize_array
from .audit import (
    DEFAULT_LOSS_SCALE,
    KerasAuditSession,
    TensorFlowAudit,
    _call,
    _np,
    _outputs_model,
    _split,
    keras_scale_code,
    keras_scaler,
    layer_fp32_hint,
)
from .environment import import_tensorflow, tf_device_name, tf_environment
from .numerics.origin import inner_amax, is_custom
from .numerics.params import ParamGrads

#: the what-if's dtypes as ml_dtypes has them (the neutral summary's ``cast``)
_DTYPES = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn,
           "e5m2": ml_dtypes.float8_e5m2}
FP8_LAYERS = ("Dense", "EinsumDense")


def ml_dtypes_cast(a: np.ndarray, kind: str) -> np.ndarray:
    """``a`` (float32) through ``kind``'s dtype and back, as ml_dtypes rounds it (to nearest even)."""
    return a.astype(_DTYPES[kind]).astype(np.float32)


def summarize(x, fp8: str | None = None, basic: bool = True) -> TensorSummary:
    """The neutral summary of a float32 array (:func:`ampkit.audit.whatif_summary.summarize`, as the
    PyTorch backend's), its casts by ml_dtypes."""
    return summarize_array(x, ml_dtypes_cast, fp8, basic)


def keras_fp8_code(keep: list, recipe: str | None, flavor=None) -> str:
    """Keras 3's float8 training (``Model.quantize("float8")``: delayed tensorwise scaling), the layers
    in ``keep`` left out; tf_keras has no float8."""
    if flavor is not None and flavor.legacy:
        return "# tf_keras has no float8 training; Keras 3 has model.quantize(\"float8\")"
    skip = f", filters=lambda layer: layer.name not in {set(keep)!r}" if keep else ""
    return f'model.quantize("float8"{skip})'


class KerasWhatIfSession(WhatIfSession):
    """A what-if session on a Keras model built once, under float32, by ``build_model``."""

    initial_scale = DEFAULT_LOSS_SCALE

    def __init__(self, build_model, x, y, loss_fn, mode: str = "fp32", *, lr: float = 1e-3, name: str | None = None,
                 seed: int = 0, notes: tuple[str, ...] = ()):  # ``mode``: unused, it observes float32
        from .engine.mixed_precision import MixedPrecision
        from .flavor import flavor_of, keras3, load_every_keras
        from .numerics.replay import MatchedRandomness

        self.x, self.y, self.loss_fn, self.lr, self.seed = x, y, loss_fn, lr, seed
        self.device, self.workload, self.notes = tf_device_name(), name, notes
        flavors = load_every_keras()
        self.mp = MixedPrecision("fp32", keras="keras")
        for fl in flavors:
            fl.module.utils.set_random_seed(seed)
        with self.mp.scope():
            self.model = build_model()
        self.flavor = flavor_of(self.model) or keras3()
        layers, self.counts, self.inter, self.sources = _outputs_model(self.model)
        self.mods = [ModuleSummary(lay.name, type(lay).__name__) for lay in layers]
        self.params = ParamGrads(layers, self.inter)
        #: custom layers (and Keras's own with sublayers) whose own code is replayed with its operations recorded
        self.inside = {i: lay for i, lay in enumerate(layers) if is_custom(lay) and self.sources[i] is not None}
        self.fp8 = [type(lay).__name__ in FP8_LAYERS for lay in layers]
        self.rng = MatchedRandomness()
        self.opt = None
        self.scale_limit: float | None = None

    def observe(self, step: int) -> None:
        tf = import_tensorflow()
        variables = self.model.trainable_variables
        with self.rng.active():
            self.rng.start(self.seed * 7919 + step)
            with self.mp.scope():
                with tf.GradientTape() as tape:
                    flat = _call(self.inter, self.x)
                    loss = self.loss_fn(self.y, flat[-1])
                grads = tape.gradient(loss, [*flat, *self.params.variables])
        if self.scale_limit is None and step == 0:
            self._loss_in_fp16(tf, flat[-1])
        outs = [_np(t) for t in flat]
        gouts = [None if g is None else _np(g) for g in grads[:len(flat)]]
        x_in = [np.asarray(v, dtype=np.float32) for v in (self.x if isinstance(self.x, (list, tuple)) else [self.x])]
        for i, (m, o, g) in enumerate(zip(self.mods, _split(outs, self.counts), _split(gouts, self.counts))):
            m.calls += 1
            for t in o:
                m.fwd.merge(summarize(t))
            for t in g:
                if t is not None:
                    m.grad.merge(summarize(t, "e5m2" if self.fp8[i] else None))
            src = self.sources[i]
            if self.fp8[i] and src:
                inp = outs[src[0]] if src[0] >= 0 else x_in[0]
                m.fp8_input = m.fp8_input or TensorSummary()
                m.fp8_input.merge(summarize(inp, "e4m3", basic=False))
            if i in self.inside:  # what its own code computes between its sublayers (an attention's scores)
                inner, _ = inner_amax(self.inside[i], [outs[j] if j >= 0 else x_in[0] for j in src],
                                      self.mp.scope(), self.flavor.legacy)
                m.fwd.amax = max(m.fwd.amax, inner) if math.isfinite(inner) else inner
        reduced = self.params.reduce(grads[len(flat):])
        for j, owner in enumerate(self.params.owner):
            if owner is not None:
                self.mods[owner].param_grad_amax = max(self.mods[owner].param_grad_amax, float(reduced[j][0]))
        if variables:
            if self.opt is None:
                with self.mp.scope():
                    self.opt = self.flavor.module.optimizers.SGD(self.lr)
            self.opt.apply_gradients([(g, v) for g, v in zip(grads[len(flat):], self.params.variables)
                                      if g is not None])

    def _loss_in_fp16(self, tf, output) -> None:
        """Whether the loss function computes in float16 on a float16 output (tf_keras's losses do;
        Keras 3's compute in float32): then LossScaleOptimizer casts the scale to float16, and a scale
        of 65520 or more is inf (the gradients with it). The scaled loss's own value may overflow:
        the gradients do not depend on it (seen on MobileNetV2: loss 2.17 x 32768, finite gradients)."""
        try:
            kind = self.loss_fn(self.y, tf.cast(output, tf.float16)).dtype
        except Exception:  # a loss that refuses float16: it computes in float32
            return
        if kind == tf.float16:
            self.scale_limit = 65504.0

    def summaries(self) -> list[ModuleSummary]:
        return list(self.mods)

    def advice(self) -> Advice:
        return Advice(partial(layer_fp32_hint, self.model, self.flavor), keras_scaler(self.flavor), "initial_scale",
                      partial(keras_scale_code, flavor=self.flavor), 'mp = ampkit.keras.MixedPrecision("bf16")',
                      partial(keras_fp8_code, flavor=self.flavor))

    def environment(self) -> dict:
        return tf_environment(self.flavor)

    def close(self) -> None:
        """The model was built for the what-if run: nothing of the caller's to give back."""


class TensorFlowWhatIfAudit(TensorFlowAudit):
    """:class:`ampkit.audit.ops.AuditOps` for Keras, ``--what-if`` included: the one table of its
    sessions by kind (:func:`ampkit.audit.ops.session_kind`); no ``fp8`` (Keras's float8 layers are
    trained, not audited against bf16 and fp32: ``--what-if --formats fp8`` predicts them)."""

    audit_sessions = MappingProxyType({"plain": KerasAuditSession, "what_if": KerasWhatIfSession})
