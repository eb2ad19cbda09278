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

import contextlib
import keyword
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

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
    precision_threshold,
)
from ...errors import UsageError, one_line
from ...isolation import stop_requested
from .devices import resolve_device
from .engine import MixedPrecision
from .environment import torch_environment
from .numerics.hooks import Recorder, origin_backward
from .numerics.probes import InputProbe, StepProbe
from .workloads import Workload, build_workload, check_builtin, cross_entropy, default_workload

#: GradScaler's default init_scale: an fp16 audit looks at what a default run sees
DEFAULT_LOSS_SCALE = 2.0**16


def _run(model, workload, batch, mp: MixedPrecision, probe: StepProbe) -> tuple[list, dict]:
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
          loss_scale: float | None = None, steps: int = 1, device="auto", lr: float | None = None,
          seed: int = 0) -> AuditReport:
    """Audit the numerics of ``mode`` layer by layer against an fp32 reference.

    Args:
        model_or_workload: an ``ampkit.Workload`` (its model, batch maker and loss are used), or
            a model together with ``batch=(inputs, targets)`` and ``loss_fn(output, targets)``.
        mode: ``fp16``, ``bf16`` (aliases accepted) or ``auto`` (auto's choice when it is fp16 or
            bf16, else bf16; the report's ``resolved_from`` and ``note`` say so).
        loss_scale: the fixed loss scale to audit at (default: the engine's initial scale,
            2**16 for fp16; 1 for bf16, which uses no scaling).
        steps: training steps to audit; the optimizer (AdamW) steps after each audited step.
        seed: step ``i`` runs both its fp32 reference and the audited pass from seed ``seed + i``,
            so dropout masks (and any other random draw of the model) are identical in both; the
            caller's random stream is left as it was.

    The model runs in train mode (as training does; its previous mode is restored afterwards).
    """
    if isinstance(mode, str) and mode.strip().lower() == "auto":
        from .devices import resolve_auto

        dev = resolve_device(device)
        chosen, note = audit_mode_for_auto(lambda: resolve_auto(dev))
        report = audit(model_or_workload, batch, loss_fn, mode=chosen, loss_scale=loss_scale, steps=steps,
                       device=dev, lr=lr, seed=seed)
        report.resolved_from, report.note = "auto", note + (f"; {report.note}" if report.note else "")
        return report
    scale_fixed = loss_scale is not None
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
    was_training = model.training
    # the caller's model comes back as it was: the audit trains it (AdamW, so later steps see later
    # weights) on copies' worth of memory, then puts parameters, buffers and .grad back
    saved = [(t, t.detach().clone()) for t in [*model.parameters(), *model.buffers()]]
    grads = [(p, p.grad) for p in model.parameters()]
    model.train()  # audited as training runs: dropout on, BatchNorm on batch statistics
    try:
        return _audit_steps(workload, batch, model, mode, loss_scale, steps, device, lr, seed, scale_fixed)
    finally:
        model.train(was_training)
        _restore(saved)
        for p, g in grads:
            p.grad = g


@contextlib.contextmanager
def _same_randomness(device, seed: int):
    """Both passes of a step draw the same random numbers (dropout masks, anything a model draws):
    the global generators are seeded alike inside a fork, so the user's random stream is untouched."""
    with torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        yield


def _restore(buffers) -> None:
    with torch.no_grad():
        for b, saved in buffers:
            b.copy_(saved)


def _fails_in_fp32_too(model, workload, batch, device, seed, buffers, exc: Exception) -> None:
    """When the audited step raised: does a plain fp32 training step (forward and a full backward)
    fail too? The audit's reference pass takes gradients w.r.t. module outputs only, so a model bug
    such as an in-place change of a tensor autograd saved passes there and fails only in the
    mode's full backward, where it would read as a precision problem. Raises saying so."""
    _restore(buffers)
    model.zero_grad(set_to_none=True)
    try:
        with _same_randomness(device, seed):
            loss = workload.loss(batch)
            loss.backward()
    except Exception as fp32_exc:
        raise RuntimeError(f"{one_line(exc)} — a plain float32 training step fails too "
                           f"({type(fp32_exc).__name__}), so this is the model's error, not a precision "
                           "problem") from exc
    finally:
        _restore(buffers)
        model.zero_grad(set_to_none=True)


@dataclass
class _StepRun:
    order: list        # the audited pass's module calls, in completion order
    ref_order: list    # the reference pass's
    meta: dict
    ref_fwd: dict
    ref_grad: dict
    fwd: dict
    grad: dict
    events: list
    mp: MixedPrecision
    dtypes: dict

    @property
    def forward_nonfinite(self) -> bool:
        return any(r[0] > 0 for rows in self.fwd.values() for r in rows)

    @property
    def backward_nonfinite(self) -> bool:
        return any(e[3] for e in self.events)

    @property
    def reference_nonfinite(self) -> bool:
        return any(not math.isfinite(st[0]) for d in (self.ref_fwd, self.ref_grad) for v in d.values() for st in v)


def _audited_step(model, workload, batch, mode, fmt, scale, device, seed, buffers) -> _StepRun:
    """One step at loss scale ``scale``: the fp32 reference (same weights, same random numbers, no
    optimizer step; the buffers it updates, BatchNorm's running statistics, are put back), then the
    audited mode at that fixed scale (a fresh engine keeps the scale where it was asked); a pass
    that saw inf/NaN runs again counting them exactly. Gradients are left in ``.grad``."""
    ref_probe = StepProbe(fmt, scale, None)
    with _same_randomness(device, seed):
        order, meta = _run(model, workload, batch, MixedPrecision("fp32", device), ref_probe)
    _restore(buffers)
    model.zero_grad(set_to_none=True)
    ref_fwd, ref_grad, _ = ref_probe.host()
    exact = False
    while True:
        mp = MixedPrecision(mode, device, init_scale=scale, model=model)
        probe = StepProbe(fmt, scale, ref_probe, exact=exact)
        with _same_randomness(device, seed):
            order2, _ = _run(model, workload, batch, mp, probe)
        fwd, grad, events = probe.host()
        if exact or not probe.saw_nonfinite:
            return _StepRun(order2, order, meta, ref_fwd, ref_grad, fwd,
                            grad, events, mp, probe.dtypes)
        exact = True
        _restore(buffers)
        model.zero_grad(set_to_none=True)


def _audit_steps(workload, batch, model, mode, loss_scale, steps, device, lr, seed, scale_fixed) -> AuditReport:
    fmt = format_of(mode)
    opt = torch.optim.AdamW(model.parameters(), lr=lr if lr is not None else workload.lr)
    layers: dict[str, LayerStats] = {}
    names_in_order: list[str] = []
    first_nonfinite = None
    reference_nonfinite = False
    initial_scale, backoffs = loss_scale, 0
    done = 0
    for step in range(steps):
        if stop_requested():  # Ctrl-C or SIGTERM of ampkit: keep the steps that finished
            break
        buffers = [(b, b.detach().clone()) for b in model.buffers()]
        while True:
            try:
                run = _audited_step(model, workload, batch, mode, fmt, loss_scale, device, seed + step, buffers)
            except Exception as exc:
                _fails_in_fp32_too(model, workload, batch, device, seed + step, buffers, exc)
                raise
            # GradScaler's own start: gradients that overflow only at the scale (forward and fp32
            # reference finite) make it skip the step and halve the scale. Unless the user fixed the
            # scale, the audit does the same and audits the scale a default run trains at.
            if (mode == "fp16" and not scale_fixed and run.backward_nonfinite and not run.forward_nonfinite
                    and not run.reference_nonfinite and loss_scale / 2 >= 1.0):
                loss_scale /= 2
                backoffs += 1
                _restore(buffers)
                model.zero_grad(set_to_none=True)
                continue
            break
        order, order2, meta = run.ref_order, run.order, run.meta
        candidates = {k[0] for k, rows in run.fwd.items() if meta["leaf"].get(k[0], True)
                      and any(len(r) > 1 and r[0] == 0 and r[1] > precision_threshold(fmt) for r in rows)}
        if candidates:  # what error reaches them? (the same step's forward twice more, same randomness)
            inputs = InputProbe(model, candidates, fmt)
            for engine in (MixedPrecision("fp32", device), MixedPrecision(mode, device, init_scale=loss_scale)):
                _restore(buffers)
                with _same_randomness(device, seed + step):
                    inputs.run(workload, batch, engine, reference=engine.mode == "fp32")
            _restore(buffers)
            for name, err in inputs.errors.items():
                lay = layers.setdefault(name, LayerStats(name, meta["types"].get(name, "?"), leaf=True))
                lay.input_rel_error = max(lay.input_rel_error or 0.0, err)
            del inputs
        run.mp.step(opt, zero_grad=True)
        del buffers
        if step == 0:
            for name, _ in order:
                if name not in names_in_order:
                    names_in_order.append(name)
        order_index = {k: i for i, k in enumerate(order2)}
        _accumulate(layers, meta, fmt, run.ref_fwd, run.ref_grad, run.fwd, run.grad)
        for name, kinds in run.dtypes.items():
            if name in layers:
                seen = set(layers[name].fwd_dtype.split(",")) if layers[name].fwd_dtype else set()
                layers[name].fwd_dtype = ",".join(sorted(seen | kinds))
        reference_nonfinite = reference_nonfinite or run.reference_nonfinite
        if first_nonfinite is None:
            fwd_bad = next((k for k in order2 if any(s[0] > 0 for s in run.fwd.get(k, []))), None)
            if fwd_bad is not None:
                first_nonfinite = {"name": fwd_bad[0], "phase": "forward"}
            else:
                first_nonfinite = origin_backward(run.events, meta["depth"], order_index)
            if first_nonfinite is not None:
                first_nonfinite["step"] = step
        done += 1
    ordered = [layers[n] for n in names_in_order if n in layers]
    findings, suggested = findings_for(ordered, fmt, mode, loss_scale, first_nonfinite, reference_nonfinite,
                                       Advice(torch_fp32_hint(model, device.type), "GradScaler", "init_scale",
                                              lambda s: f"scaler = torch.amp.GradScaler({device.type!r}, init_scale={s:g})",
                                              f'mp = ampkit.MixedPrecision("bf16", device={device.type!r})'))
    report = AuditReport(mode, float(loss_scale), ordered, first_nonfinite, findings, str(device), steps,
                         torch_environment(device), workload.name, reference_nonfinite, suggested,
                         interrupted=stop_requested(), steps_completed=done)
    if backoffs:
        report.initial_loss_scale, report.skipped_steps = float(initial_scale), backoffs
        report.note = backoff_note("GradScaler", initial_scale, loss_scale, backoffs)
    return report


def _accumulate(layers, meta, fmt, ref_fwd, ref_grad, fwd, grad) -> None:
    for key, stats in ref_fwd.items():
        name = key[0]
        lay = layers.setdefault(name, LayerStats(name, meta["types"].get(name, "?"), leaf=meta["leaf"].get(name, True)))
        lay.calls += 1
        for amax, nz, under, lost in stats:
            lay.fwd_amax = max(lay.fwd_amax, amax)
            lay.count_forward(nz, under, lost)
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
        for amax, nz, under, lost in stats:
            lay.grad_amax = max(lay.grad_amax, amax)
            lay.count_grad(nz, under, lost)
    for key, stats in grad.items():
        lay = layers.get(key[0])
        if lay is not None:
            lay.grad_nonfinite += int(sum(s[0] for s in stats))
    for lay in layers.values():
        lay.finish(fmt)


def module_expr(model: nn.Module, name: str, root: str = "model") -> str:
    """Python that reaches the submodule ``name`` from ``root``: ``model.layer1[0].bn1`` where every
    step can be written so (attributes, Sequential/ModuleList indices, ModuleDict keys), else
    ``model.get_submodule('...')``, which always works."""
    if not name:
        return root
    expr, parent = root, model
    for part in name.split("."):
        child = parent._modules.get(part) if parent is not None else None
        if isinstance(parent, (nn.Sequential, nn.ModuleList)) and part.isdigit():
            expr += f"[{part}]"
        elif isinstance(parent, nn.ModuleDict):
            expr += f"[{part!r}]"
        elif part.isidentifier() and not keyword.iskeyword(part) and child is not None and getattr(parent, part, None) is child:
            expr += f".{part}"
        else:
            return f"{root}.get_submodule({name!r})"
        parent = child
    return expr


def torch_fp32_hint(model: nn.Module, device_type: str):
    """Code that keeps one module of ``model`` in float32 under torch.autocast, run on the model
    object from outside (no edit of its source): its floating inputs cast to float32, autocast
    off inside its forward."""
    def hint(name: str) -> str:
        return (f"m = {module_expr(model, name)}\n"
                "m.register_forward_pre_hook(lambda mod, args: tuple(a.float() if isinstance(a, torch.Tensor) "
                "and a.is_floating_point() else a for a in args))\n"
                f"m.forward = torch.autocast({device_type!r}, enabled=False)(m.forward)")
    return hint


#: the default batch of an audit of a zoo workload on a CPU: an audited step keeps a float32 copy of
#: every module's output besides two graphs (measured: bert-base at batch 4, sequence 128, peaks at
#: 4.5 GB; at its bench batch of 32 it was killed for memory on a 24 GiB machine)
CPU_ZOO_AUDIT_BATCH = 4
ZOO = ("resnet50", "vit_b_16", "bert-base", "gpt2")


def audit_batch_size(workload: Workload, name: str | None, device) -> tuple[int, str | None]:
    """The batch to audit at and a note when it is not the workload's own: the zoo's on a CPU is
    capped (``--batch-size`` overrides it). Gradient magnitudes depend on the batch (a mean loss),
    so the note says so."""
    if device.type == "cpu" and name in ZOO and workload.batch_size > CPU_ZOO_AUDIT_BATCH:
        return CPU_ZOO_AUDIT_BATCH, (f"audited at batch {CPU_ZOO_AUDIT_BATCH}, not {name}'s {workload.batch_size}, "
                                     "to fit a CPU's memory; gradients scale with 1/batch, so pass --batch-size "
                                     "to audit the batch you train with")
    return workload.batch_size, None


def audit_from_config(cfg: AuditConfig) -> AuditReport:
    """The CLI's entry: a built-in workload or MODULE:FACTORY, built as bench builds them."""
    device = resolve_device(cfg.device)
    if cfg.workload and cfg.model:
        raise UsageError("give either --workload or --model, not both")
    workload_name = None if cfg.model else check_builtin(cfg.workload or default_workload(device))
    workload = build_workload(workload_name, cfg.model, cfg.input_shape, cfg.num_classes, device, seed=cfg.seed)
    bs, batch_note = (cfg.batch_size, None) if cfg.batch_size else audit_batch_size(workload, workload_name, device)
    batch = workload.make_batch(bs, device, torch.Generator().manual_seed(cfg.seed))
    try:
        report = audit(workload, batch, mode=cfg.mode, loss_scale=cfg.loss_scale, steps=cfg.steps, device=device,
                       seed=cfg.seed)
        if batch_note:
            report.note = f"{report.note}; {batch_note}" if report.note else batch_note
        return report
    except UsageError:
        raise
    except Exception as exc:
        if cfg.model:
            raise UsageError(f"{cfg.model} failed under audit: {type(exc).__name__}: {str(exc).splitlines()[0]}")
        raise


class TorchAudit:
    """torch/audit's operations for the neutral driver (being written: issue #21)."""
