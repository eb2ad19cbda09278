"""``ampkit.audit`` for PyTorch: per-module numerics of a mixed-precision step against an fp32 reference.

Each step runs the model twice on the same batch and the same weights: an fp32 reference
(TF32 off) and the audited mode through ``ampkit.MixedPrecision`` at a FIXED loss scale. Hooks
record, per module call: forward output magnitude, the share of the reference's nonzero values
that the mode's format flushes to zero or subnormal, non-finite values, relative error against
the reference; and the same for gradients w.r.t. module outputs, at the given loss scale.
After the audited step the optimizer steps (through the engine), so later steps see later weights.

Memory: the reference run's outputs are kept (float32) to compare against, so an audited step
needs about twice the activation memory of a plain one.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn

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
from ...formats import FloatFormat
from ...isolation import stop_requested
from .devices import resolve_device
from .engine import MixedPrecision
from .environment import torch_environment
from .numerics.hooks import Recorder, origin_backward
from .workloads import Workload, build_workload, check_builtin, cross_entropy, default_workload

#: GradScaler's default init_scale: an fp16 audit looks at what a default run sees
DEFAULT_LOSS_SCALE = 2.0**16


class _StepProbe:
    """Device-side statistics for one run of one step: few kernels per tensor, one transfer.

    Every statistic is a 0-d tensor appended to one flat list; :meth:`host` stacks it and pulls
    it in a single transfer (one host-device sync per run), then derives the rest on the host.

    Reference run (fp32): per output and per output-gradient amax, nonzero count and the count
    below the smallest normal (gradients judged at the loss scale: |g| < normal / scale), plus
    each output's norm. Audited run: per output a probe (a float32 sum, non-finite exactly when
    some element is; isfinite is several times slower on CPUs) and its distance to the
    reference; per gradient tensor one probe, shared by every module the tensor belongs to.
    With ``exact`` the probes are inf/NaN counts (the re-run after a non-finite fast pass).
    """

    def __init__(self, fmt: FloatFormat, scale: float, reference: _StepProbe | None, exact: bool = False):
        self.fmt, self.scale, self.reference, self.exact = fmt, scale, reference, exact
        self._vals: list[torch.Tensor] = []
        self._fwd: dict = {}      # key -> [(kind-specific record)]
        self._grad: dict = {}
        self._events: list = []   # (key, kind, tensor id, index of the probe)
        self._by_tid: dict = {}   # tensor id -> index of its gradient probe
        self.outputs: dict = {}   # reference outputs kept for the distance
        self.norms: dict = {}     # key -> [norm of each reference output] (host floats after host())
        self._saw = False

    def _put(self, *tensors: torch.Tensor) -> int:
        self._vals.extend(tensors)
        return len(self._vals) - len(tensors)

    def _magnitudes(self, x: torch.Tensor, threshold: float) -> tuple[int, int]:
        a = x.abs()
        amax = a.max() if a.numel() else a.new_zeros(())
        return self._put(amax.float(), torch.count_nonzero(a).float(), torch.count_nonzero(a < threshold).float()), a.numel()

    def _probe(self, x: torch.Tensor) -> torch.Tensor:
        if self.exact:
            return (x.numel() - torch.isfinite(x).sum()).float()
        return x.sum(dtype=torch.float32)

    def on_forward(self, key, tensors) -> None:
        if not tensors:
            return
        if self.reference is None:
            for t in tensors:
                x = t.detach().float()
                self._fwd.setdefault(key, []).append(self._magnitudes(x, self.fmt.smallest_normal))
                # keep a copy: a later in-place op (ReLU(inplace=True)) must not change it
                kept = x.clone() if x is t else x
                self.outputs.setdefault(key, []).append(kept)
                self.norms.setdefault(key, []).append(self._put(kept.norm()))
            return
        ref = self.reference.outputs.get(key, [])
        for i, t in enumerate(tensors):
            x = t.detach()
            same = i < len(ref) and ref[i].shape == x.shape
            dist = torch.dist(x.float(), ref[i]) if same else None
            idx = self._put(self._probe(x), dist) if same else self._put(self._probe(x))
            self._fwd.setdefault(key, []).append((idx, i if same else None))

    def on_grad(self, key, kind, grad, tid) -> None:
        g = grad.detach()
        if self.reference is None:  # reference: magnitudes of output gradients only
            if kind == "output":
                self._grad.setdefault(key, []).append(self._magnitudes(g.float(), self.fmt.smallest_normal / self.scale))
            return
        idx = self._by_tid.get(tid)
        if idx is None:  # one probe per gradient tensor, however many modules it belongs to
            idx = self._by_tid[tid] = self._put(self._probe(g))
        self._events.append((key, kind, tid, idx))
        if kind == "output":
            self._grad.setdefault(key, []).append(idx)

    @property
    def saw_nonfinite(self) -> bool:
        """After host(): whether the fast pass saw an inf/NaN (then the step is re-run exactly)."""
        return self._saw

    def _bad(self, v: float) -> float:
        return v if self.exact else (0.0 if math.isfinite(v) else 1.0)

    def host(self) -> tuple[dict, dict, list]:
        """One transfer to the host per run (a host-device sync, once per run of an audited step)."""
        flat = torch.stack(self._vals).tolist() if self._vals else []
        if self.reference is None:
            def mags(recs):
                return [[flat[i], flat[i + 1], flat[i + 2] - (n - flat[i + 1])] for i, n in recs]
            self.norms = {k: [flat[i] for i in v] for k, v in self.norms.items()}
            return ({k: mags(v) for k, v in self._fwd.items()}, {k: mags(v) for k, v in self._grad.items()}, [])
        norms = self.reference.norms
        fwd = {}
        for key, recs in self._fwd.items():
            rows = []
            for idx, ref_i in recs:
                bad = self._bad(flat[idx])
                if ref_i is None:
                    rows.append([bad])
                else:
                    rows.append([bad, flat[idx + 1] / max(norms[key][ref_i], 1e-30)])
            fwd[key] = rows
        grad = {k: [[self._bad(flat[i])] for i in v] for k, v in self._grad.items()}
        events = [(k, kind, tid, self._bad(flat[i]) > 0) for k, kind, tid, i in self._events]
        self._saw = any(e[3] for e in events) or any(r[0] > 0 for v in fwd.values() for r in v)
        return fwd, grad, events


def _run(model, workload, batch, mp: MixedPrecision, probe: _StepProbe) -> tuple[list, dict]:
    reference = probe.reference is None
    with Recorder(model, probe.on_forward, probe.on_grad, grad_inputs=not reference) as rec:
        with mp.autocast():
            loss = workload.loss(batch)
        if reference:
            # the reference needs gradients w.r.t. module outputs only: no weight gradients,
            # which saves the weight-gradient matmuls of a full backward
            targets = rec.grad_targets
            if targets and loss.requires_grad:
                torch.autograd.grad(loss, targets, allow_unused=True)
        else:
            mp.backward(loss)
    return rec.order, {"depth": rec.depth, "leaf": rec.leaf, "types": rec.types}


def audit(model_or_workload: nn.Module | Workload, batch: Any = None, loss_fn=cross_entropy, *, mode: str = "fp16",
          loss_scale: float | None = None, steps: int = 1, device="auto", lr: float | None = None) -> AuditReport:
    """Audit the numerics of ``mode`` layer by layer against an fp32 reference.

    Args:
        model_or_workload: an ``ampkit.Workload`` (its model, batch maker and loss are used), or
            a model together with ``batch=(inputs, targets)`` and ``loss_fn(output, targets)``.
        mode: ``fp16``, ``bf16`` (aliases accepted) or ``auto`` (auto's choice when it is fp16 or
            bf16, else bf16; the report's ``resolved_from`` and ``note`` say so).
        loss_scale: the fixed loss scale to audit at (default: the engine's initial scale,
            2**16 for fp16; 1 for bf16, which uses no scaling).
        steps: training steps to audit; the optimizer (AdamW) steps after each audited step.
    """
    if isinstance(mode, str) and mode.strip().lower() == "auto":
        from .devices import resolve_auto

        dev = resolve_device(device)
        chosen, note = audit_mode_for_auto(lambda: resolve_auto(dev))
        report = audit(model_or_workload, batch, loss_fn, mode=chosen, loss_scale=loss_scale, steps=steps,
                       device=dev, lr=lr)
        report.resolved_from, report.note = "auto", note
        return report
    mode, loss_scale = check_audit_args(mode, steps, loss_scale, DEFAULT_LOSS_SCALE)
    device = resolve_device(device)
    if isinstance(model_or_workload, Workload):
        workload = model_or_workload
        workload.model.to(device)
        batch = workload.make_batch(workload.batch_size, device, torch.Generator().manual_seed(0)) if batch is None else batch
    else:
        if batch is None:
            raise UsageError("audit(model, batch=(inputs, targets)) needs a batch, or pass an ampkit.Workload")
        workload = Workload(model_or_workload.to(device), lambda *a: batch, loss_fn=loss_fn)
    model = workload.model
    fmt = format_of(mode)
    opt = torch.optim.AdamW(model.parameters(), lr=lr if lr is not None else workload.lr)
    layers: dict[str, LayerStats] = {}
    names_in_order: list[str] = []
    first_nonfinite = None
    reference_nonfinite = False
    done = 0
    for step in range(steps):
        if stop_requested():  # Ctrl-C or SIGTERM of ampkit: keep the steps that finished
            break
        # reference: fp32, same weights, no optimizer step
        ref_probe = _StepProbe(fmt, loss_scale, None)
        order, meta = _run(model, workload, batch, MixedPrecision("fp32", device), ref_probe)
        opt.zero_grad(set_to_none=True)
        ref_fwd, ref_grad, _ = ref_probe.host()
        # audited mode at a fixed scale: a fresh engine each step keeps the scale where it was asked
        mp = MixedPrecision(mode, device, init_scale=loss_scale, model=model)
        probe = _StepProbe(fmt, loss_scale, ref_probe)
        order2, _ = _run(model, workload, batch, mp, probe)
        fwd, grad, events = probe.host()
        if probe.saw_nonfinite:  # the same step again (same weights), counting inf/NaN exactly
            opt.zero_grad(set_to_none=True)
            mp = MixedPrecision(mode, device, init_scale=loss_scale, model=model)
            probe = _StepProbe(fmt, loss_scale, ref_probe, exact=True)
            order2, _ = _run(model, workload, batch, mp, probe)
            fwd, grad, events = probe.host()
        mp.step(opt, zero_grad=True)
        del ref_probe
        if step == 0:
            for name, _ in order:
                if name not in names_in_order:
                    names_in_order.append(name)
        order_index = {k: i for i, k in enumerate(order2)}
        _accumulate(layers, meta, fmt, ref_fwd, ref_grad, fwd, grad)
        reference_nonfinite = reference_nonfinite or any(
            not math.isfinite(st[0]) for d in (ref_fwd, ref_grad) for v in d.values() for st in v)
        if first_nonfinite is None:
            fwd_bad = next((k for k in order2 if any(s[0] > 0 for s in fwd.get(k, []))), None)
            if fwd_bad is not None:
                first_nonfinite = {"name": fwd_bad[0], "phase": "forward"}
            else:
                first_nonfinite = origin_backward(events, meta["depth"], order_index)
            if first_nonfinite is not None:
                first_nonfinite["step"] = step
        done += 1
    ordered = [layers[n] for n in names_in_order if n in layers]
    findings, suggested = findings_for(ordered, fmt, mode, loss_scale, first_nonfinite, reference_nonfinite,
                                       Advice(torch_fp32_hint(device.type), "GradScaler", "init_scale"))
    return AuditReport(mode, float(loss_scale), ordered, first_nonfinite, findings, str(device), steps,
                       torch_environment(device), workload.name, reference_nonfinite, suggested,
                       interrupted=stop_requested(), steps_completed=done)


def _accumulate(layers, meta, fmt, ref_fwd, ref_grad, fwd, grad) -> None:
    for key, stats in ref_fwd.items():
        name = key[0]
        lay = layers.setdefault(name, LayerStats(name, meta["types"].get(name, "?"), leaf=meta["leaf"].get(name, True)))
        lay.calls += 1
        for amax, nz, under in stats:
            lay.fwd_amax = max(lay.fwd_amax, amax)
            lay.count_forward(nz, under)
    for key, stats in fwd.items():
        lay = layers.get(key[0])
        if lay is None:
            continue
        for s in stats:
            lay.fwd_nonfinite += int(s[0])
            if len(s) > 1 and s[0] == 0 and math.isfinite(s[1]):
                lay.rel_error = max(lay.rel_error or 0.0, s[1])
    for key, stats in ref_grad.items():
        lay = layers.get(key[0])
        if lay is None:
            continue
        for amax, nz, under in stats:
            lay.grad_amax = max(lay.grad_amax, amax)
            lay.count_grad(nz, under)
    for key, stats in grad.items():
        lay = layers.get(key[0])
        if lay is not None:
            lay.grad_nonfinite += int(sum(s[0] for s in stats))
    for lay in layers.values():
        lay.finish(fmt)


def torch_fp32_hint(device_type: str):
    """How to keep one module in float32 under torch.autocast."""
    return lambda name: (f"`with torch.autocast('{device_type}', enabled=False): y = self.{name}(x.float())`")


def audit_from_config(cfg: AuditConfig) -> AuditReport:
    """The CLI's entry: a built-in workload or MODULE:FACTORY, built as bench builds them."""
    device = resolve_device(cfg.device)
    if cfg.workload and cfg.model:
        raise UsageError("give either --workload or --model, not both")
    workload_name = None if cfg.model else check_builtin(cfg.workload or default_workload(device))
    workload = build_workload(workload_name, cfg.model, cfg.input_shape, cfg.num_classes, device, seed=cfg.seed)
    bs = cfg.batch_size or workload.batch_size
    batch = workload.make_batch(bs, device, torch.Generator().manual_seed(cfg.seed))
    try:
        return audit(workload, batch, mode=cfg.mode, loss_scale=cfg.loss_scale, steps=cfg.steps, device=device)
    except UsageError:
        raise
    except Exception as exc:
        if cfg.model:
            raise UsageError(f"{cfg.model} failed under audit: {type(exc).__name__}: {str(exc).splitlines()[0]}")
        raise
