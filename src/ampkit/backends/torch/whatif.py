"""``ampkit audit --what-if`` for PyTorch: float32 training steps with per-module summaries.

Each step runs the model in float32 (TF32 off) on the audit's batch, as training runs (train mode,
the same random numbers per step as the audit's reference), with hooks on every module: the
forward output and the gradient w.r.t. it are summarized where they are produced
(:mod:`.numerics.summary`: the neutral summary, the Keras backend's too), the input of every
``nn.Linear`` (what an fp8 recipe quantizes) too. A full backward follows and AdamW steps, so later
steps see later weights. Each distinct tensor is summarized once, from a float32 host copy (on a
GPU: a device-to-host transfer each) that is not kept. The predictions are the neutral
:mod:`ampkit.audit.whatif`'s.
"""

from __future__ import annotations

import weakref
from types import MappingProxyType

import torch
import torch.nn as nn

from ...audit.ops import WhatIfSession
from ...summaries import ModuleSummary, TensorSummary
from .audit import DEFAULT_LOSS_SCALE, TorchAudit, TorchAuditSession
from .audit_fp8 import Fp8AuditSession
from .engine import MixedPrecision
from .numerics.hooks import Recorder, float_tensors
from .numerics.params import holder as _holder
from .numerics.replay import same_randomness, snapshot
from .numerics.summary import summarize
from .whatif_carried import carried_errors
from .whatif_inner import InnerOps, autocast_dtypes

#: module types an fp8 recipe converts (torchao's convert_to_float8_training: nn.Linear)
FP8_TYPES = (nn.Linear,)


class _Probe:
    """Summaries of one step: one per distinct tensor (a container returning its last
    child's output, or one gradient reaching several modules, is summarized once)."""

    def __init__(self):
        self.summaries: list[TensorSummary] = []
        self.records: list[tuple[str, str, int]] = []   # (module name, "fwd"|"grad"|"in", index in summaries)
        self._seen: dict = {}

    def add(self, name: str, part: str, t: torch.Tensor, fp8: str | None = None, basic: bool = True) -> None:
        with torch._C.DisableTorchFunction():   # its own kernels are not the model's ops (whatif_inner.InnerOps)
            self._add(name, part, t, fp8, basic)

    def _add(self, name: str, part: str, t: torch.Tensor, fp8: str | None, basic: bool) -> None:
        key = (id(t), t._version)
        seen = self._seen.get(key)
        if seen is None or seen[0]() is not t or (fp8 and seen[2] != fp8) or (basic and not seen[3]):
            self.summaries.append(summarize(t, fp8, basic))
            seen = self._seen[key] = (weakref.ref(t), len(self.summaries) - 1, fp8, basic)
        self.records.append((name, part, seen[1]))

    def host(self) -> list[tuple[str, str, TensorSummary]]:
        return [(name, part, self.summaries[i]) for name, part, i in self.records]


def _finite_part(t: torch.Tensor) -> torch.Tensor:
    """``t`` with its inf/NaN values as 0 (``t`` itself when it has none)."""
    with torch._C.DisableTorchFunction():   # not one of the model's ops
        ok = torch.isfinite(t)
        return t if bool(ok.all()) else torch.where(ok, t, torch.zeros((), dtype=t.dtype, device=t.device))


class TorchWhatIfSession(TorchAuditSession, WhatIfSession):
    """A what-if session: the audit session's model, batch and state handling, float32 steps only."""

    initial_scale = DEFAULT_LOSS_SCALE

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._mods: dict[str, ModuleSummary] = {}
        self._order: list[str] = []
        self.fp32 = MixedPrecision("fp32", self.dev)
        self._fp8 = {name for name, m in self.model.named_modules() if isinstance(m, FP8_TYPES)}
        self._dtypes = None   # (module -> outputs low, (module, op) -> low) under fp16 autocast (whatif_inner)
        self._carried = None  # {leaf: (output error, input error)} of one bf16 forward (whatif_carried)

    def observe(self, step: int) -> None:
        """One float32 training step, its forward outputs and output gradients summarized."""
        probe = _Probe()
        fp8 = self._fp8

        def on_forward(key, tensors):
            for t in tensors:
                probe.add(key[0], "fwd", t)

        def on_grad(key, kind, grad, tid):
            if kind == "output":
                probe.add(key[0], "grad", grad, "e5m2" if key[0] in fp8 else None)

        def pre(name):
            def hook(module, args):
                if torch.is_grad_enabled():
                    for t in float_tensors(args)[:1]:
                        probe.add(name, "in", t, "e4m3", basic=False)
            return hook

        if self._dtypes is None:  # what autocast holds in float32 (the same for fp16 and bf16)
            def fp16_forward():
                with same_randomness(self.dev, self.seed + step), MixedPrecision("fp16", self.dev).autocast():
                    self.workload_obj.loss(self.batch)
            self._dtypes = autocast_dtypes(self.model, fp16_forward) or ({}, {})
        amplified: list = []
        if step == 0 and self._carried is None:  # what a bf16 run carries from layer to layer (.whatif_carried)
            self._carried = carried_errors(self.model, lambda: self.workload_obj.loss(self.batch), self.dev,
                                           self.seed + step, self.fp32, MixedPrecision("bf16", self.dev))
        # a value float32 computes non-finite inside a module's own code is no format's overflow: where it matters
        # it reaches the module's output or gradient (judged there); where not, the model discards it on purpose
        # (an attention mask of -inf added to the scores, T5's log(0) bucket) -- its finite part is summarized
        inner = InnerOps(self.model, lambda name, op, t: probe.add(name, "inner:" + op, _finite_part(t)),
                         self._dtypes[1], lambda name, op, errors: amplified.append((name, op, errors)))
        handles = [m.register_forward_pre_hook(pre(n)) for n, m in self.model.named_modules() if n in fp8]
        try:
            with same_randomness(self.dev, self.seed + step):
                with Recorder(self.model, on_forward, on_grad, grad_inputs=False, keep_grad_targets=False) as rec:
                    with self.fp32.autocast(), inner:
                        loss = self.workload_obj.loss(self.batch)
                    loss.backward()
        finally:
            for h in handles:
                h.remove()
        param_amax = self._params.reference([p.grad for _, p in self._params.named])  # before the step
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        for name in dict.fromkeys(k[0] for k in rec.order):
            if name not in self._mods:
                self._order.append(name)
                self._mods[name] = ModuleSummary(name, rec.types.get(name, "?"), leaf=rec.leaf.get(name, True),
                                                 fwd_low=self._dtypes[0].get(name, True))
        for param, amax in param_amax.items():
            holder = _holder(self._mods, param)
            if holder is not None:
                holder.param_grad_amax = max(holder.param_grad_amax, amax)
        for name, op, errors in amplified:  # a softmax's output error per format (.whatif_softmax)
            mod = self._mods.get(name)
            if mod is not None:
                mod.amplify(op, errors)
        for name, part, summary in probe.host():
            mod = self._mods.get(name)
            if mod is None:
                continue
            if part == "fwd":
                mod.calls += 1
                mod.fwd.merge(summary)
            elif part == "grad":
                mod.grad.merge(summary)
            elif part.startswith("inner:"):
                if mod.inner is None:
                    mod.inner = type(summary)()
                if not mod.inner.amax >= summary.amax:   # larger, or NaN
                    mod.inner_op = part[len("inner:"):]
                mod.inner.merge(summary)
            else:
                if mod.fp8_input is None:
                    mod.fp8_input = type(summary)()
                mod.fp8_input.merge(summary)
        if step == 0:
            self._check_noise(step)

    def _check_noise(self, step: int) -> None:
        """Modules whose float32 output gradients fp16 would lose at the default scale: which of those are
        float32 rounding noise (a float64 pass, :mod:`.numerics.noise`, as the real audit checks): the
        what-if then judges them as the audit does (issue #34: mobilevit's one-token attention)."""
        from ...formats import FP16, UNDERFLOW_THRESHOLD, lost_below
        from .numerics.noise import noise_shares

        at = lost_below(FP16)
        names = {n for n, m in self._mods.items()
                 if m.grad.nonzero and m.grad.share_below(at, self.initial_scale) > UNDERFLOW_THRESHOLD}
        if not names:
            return
        buffers = snapshot(self.model)
        for name, (noise, lost) in noise_shares(self.model, self.workload_obj, self.batch, names, self.dev,
                                                  self.seed + step, buffers, at / self.initial_scale).items():
            self._mods[name].grad_noise, self._mods[name].grad_signal_lost = noise, lost

    def summaries(self) -> list[ModuleSummary]:
        for name, errs in (self._carried or {}).items():
            if name in self._mods:
                self._mods[name].carried["bf16"] = errs
        return [self._mods[n] for n in self._order]


class TorchWhatIfAudit(TorchAudit):
    """:class:`ampkit.audit.ops.AuditOps` for PyTorch, ``--what-if`` included: the one table of its
    sessions by kind (:func:`ampkit.audit.ops.session_kind`)."""

    audit_sessions = MappingProxyType({"plain": TorchAuditSession, "fp8": Fp8AuditSession, "what_if": TorchWhatIfSession})
