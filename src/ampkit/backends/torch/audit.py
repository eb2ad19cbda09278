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

import keyword
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from ...audit.core import Advice, format_of, merge_dtypes, precision_threshold
from ...audit.ops import StepOutcome
from ...audit.report import AuditReport, LayerStats
from ...errors import UsageError, one_line
from .engine import MixedPrecision
from .engine.contract import audit_findings
from .engine.islands import hook_plan
from .environment import torch_environment
from .numerics.hooks import Recorder, origin_backward
from .numerics.probes import InputProbe, StepProbe
from .numerics.replay import restore as _restore
from .numerics.replay import same_randomness as _same_randomness
from .workloads import Workload, build_workload, cross_entropy

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
          seed: int = 0, what_if: bool = False, formats=None, compile: bool = False) -> AuditReport:
    """Audit the numerics of ``mode`` layer by layer against an fp32 reference: ``ampkit.audit``
    (the same parameters), run by the neutral driver through :class:`TorchAudit`'s session.

    The model runs in train mode (as training does); parameters, buffers, ``.grad`` and its
    train/eval mode are put back afterwards.
    """
    from ...audit import audit as neutral_audit

    return neutral_audit(model_or_workload, batch, loss_fn, mode=mode, loss_scale=loss_scale, steps=steps,
                         device=device, lr=lr, seed=seed, what_if=what_if, formats=formats,
                         compile=compile)


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


class TorchAuditSession:
    """:class:`ampkit.audit.ops.AuditSession` for a torch model: a workload's model and one batch.

    Opening it puts the model in train mode (audited as training runs: dropout on, BatchNorm on
    batch statistics) and keeps copies of its parameters, buffers and ``.grad``; :meth:`close` puts
    all of it back. Between audited steps the optimizer (AdamW) steps through the engine."""

    initial_scale = DEFAULT_LOSS_SCALE

    def __init__(self, workload: Workload, batch, mode: str, device, *, lr: float | None = None, seed: int = 0,
                 notes: tuple[str, ...] = (), plan: dict | None = None):
        self.workload_obj, self.batch, self.mode, self.dev, self.seed = workload, batch, mode, device, seed
        self.device, self.workload, self.notes = str(device), workload.name, notes
        self.fmt = format_of(mode)
        model = self.model = workload.model
        self._was_training = model.training
        # the caller's model comes back as it was: the audit trains it (AdamW, so later steps see later
        # weights) on copies' worth of memory, then puts parameters, buffers and .grad back
        self._saved = [(t, t.detach().clone()) for t in [*model.parameters(), *model.buffers()]]
        self._grads = [(p, p.grad) for p in model.parameters()]
        model.train()
        self._islands = hook_plan(plan, model, device)  # a precision plan's float32 islands, on the model itself
        self.opt = torch.optim.AdamW(model.parameters(), lr=lr if lr is not None else workload.lr)
        self._layers: dict[str, LayerStats] = {}
        self._names: list[str] = []
        self._step, self._buffers, self._run, self._scale = None, None, None, 1.0
        self._contract: list | None = None  # the precision contract after the first trained step (#22)

    def measure(self, step: int, scale: float) -> StepOutcome:
        if self._step != step:  # what the reference and each retry start from
            self._step, self._buffers = step, [(b, b.detach().clone()) for b in self.model.buffers()]
        args = (self.model, self.workload_obj, self.batch)
        try:
            run = _audited_step(*args, self.mode, self.fmt, scale, self.dev, self.seed + step, self._buffers)
        except Exception as exc:
            _fails_in_fp32_too(*args, self.dev, self.seed + step, self._buffers, exc)
            raise
        self._run, self._scale = run, scale
        first = next(({"name": k[0], "phase": "forward"} for k in run.order
                      if any(s[0] > 0 for s in run.fwd.get(k, []))), None)
        if first is None:
            first = origin_backward(run.events, run.meta["depth"], {k: i for i, k in enumerate(run.order)})
        return StepOutcome(run.forward_nonfinite, run.backward_nonfinite, run.reference_nonfinite, first)

    def rewind(self) -> None:
        _restore(self._buffers)
        self.model.zero_grad(set_to_none=True)

    def record(self) -> None:
        run, meta, layers = self._run, self._run.meta, self._layers
        candidates = {k[0] for k, rows in run.fwd.items() if meta["leaf"].get(k[0], True)
                      and any(len(r) > 1 and r[0] == 0 and r[1] > precision_threshold(self.fmt) for r in rows)}
        if candidates:  # what error reaches them? (the same step's forward twice more, same randomness)
            inputs = InputProbe(self.model, candidates, self.fmt)
            for engine in (MixedPrecision("fp32", self.dev), MixedPrecision(self.mode, self.dev, init_scale=self._scale)):
                _restore(self._buffers)
                with _same_randomness(self.dev, self.seed + self._step):
                    inputs.run(self.workload_obj, self.batch, engine, reference=engine.mode == "fp32")
            _restore(self._buffers)
            for name, err in inputs.errors.items():
                lay = layers.setdefault(name, LayerStats(name, meta["types"].get(name, "?"), leaf=True))
                lay.input_rel_error = max(lay.input_rel_error or 0.0, err)
        if not self._names:
            self._names = list(dict.fromkeys(name for name, _ in run.ref_order))
        _accumulate(layers, meta, run.ref_fwd, run.ref_grad, run.fwd, run.grad)
        for name, kinds in run.dtypes.items():
            if name in layers:
                merge_dtypes(layers[name], kinds)

    def train(self, scale: float) -> None:
        self._run.mp.step(self.opt, zero_grad=True)  # the engine of the measured pass: at ``scale``
        if self._contract is None:
            self._contract = audit_findings(self._run.mp, self.model, self.opt)
        self._run = self._buffers = self._step = None

    def layers(self) -> list[LayerStats]:
        return [self._layers[n] for n in self._names if n in self._layers]

    def compile_findings(self) -> tuple[list, str | None]:
        from .audit_compile import compile_check

        return compile_check(self.model, self.batch[0], self.mode, self.fmt, self.dev, self.seed)

    def contract_findings(self) -> list:
        """Findings of kind ``"contract"`` (engine.contract.audit_findings), read by the driver."""
        return self._contract or []

    def advice(self) -> Advice:
        kind = self.dev.type
        return Advice(torch_fp32_hint(self.model, kind), "GradScaler", "init_scale",
                      lambda s: f"scaler = torch.amp.GradScaler({kind!r}, init_scale={s:g})",
                      f'mp = ampkit.MixedPrecision("bf16", device={kind!r})', torch_fp8_code)

    def environment(self) -> dict:
        return torch_environment(self.dev)

    def close(self) -> None:
        self._run = self._buffers = None
        if self._islands is not None:
            self._islands.remove()
        self.model.train(self._was_training)
        _restore(self._saved)
        for p, g in self._grads:
            p.grad = g


def _accumulate(layers, meta, ref_fwd, ref_grad, fwd, grad) -> None:
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


def torch_fp8_code(keep: list, recipe: str | None) -> str:
    """Code converting a model to fp8 training with torchao's float8 (``recipe``: tensorwise or rowwise),
    the modules in ``keep`` left out (in the mode the rest of training uses)."""
    recipe = recipe or "tensorwise"
    config = ("Float8LinearConfig()" if recipe == "tensorwise" else
              f"Float8LinearConfig.from_recipe_name({recipe!r})")
    skip = f"module_filter_fn=lambda mod, fqn: fqn not in {set(keep)!r}, " if keep else ""
    return ("from torchao.float8 import Float8LinearConfig, convert_to_float8_training\n"
            f"convert_to_float8_training(model, {skip}config={config})")


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


class TorchAudit:
    """:class:`ampkit.audit.ops.AuditOps` for PyTorch."""

    def session_class(self, config) -> type:
        """The session an audit opens (``--what-if``'s is added by :class:`.whatif.TorchWhatIfAudit`)."""
        if config.what_if:
            raise UsageError("--what-if is not available in this build of the torch backend")
        return TorchAuditSession

    def audit_session(self, config, target, live=None) -> TorchAuditSession:
        device = torch.device(target.device)
        cls = self.session_class(config)
        if config.mode == "fp8" and not config.what_if:  # torchao's fp8 layers against bf16 and fp32: a session of its own
            from .audit_fp8 import Fp8AuditSession as cls
        kw = {"plan": config.plan} if getattr(config, "plan", None) else {}  # a precision plan to audit under
        if live is not None:
            return cls(*_live_workload(live, device), config.mode, device, lr=live.lr, seed=config.seed, **kw)
        workload = build_workload(config.workload, config.model, config.input_shape, config.num_classes, device,
                                  seed=config.seed, seq_len=config.seq_len, image_size=config.image_size)
        bs, note = ((config.batch_size, None) if config.batch_size
                    else audit_batch_size(workload, config.workload, device))
        batch = workload.make_batch(bs, device, torch.Generator().manual_seed(config.seed))
        return cls(workload, batch, config.mode, device, seed=config.seed, notes=(note,) if note else (), **kw)


def _live_workload(live, device) -> tuple[Workload, Any]:
    """The library's model or Workload on ``device``, and the batch to audit (a Workload makes its
    own when none was given)."""
    if isinstance(live.model, Workload):
        workload = live.model
        workload.model.to(device)
        if live.batch is not None:
            return workload, live.batch
        return workload, workload.make_batch(workload.batch_size, device, torch.Generator().manual_seed(0))
    if not isinstance(live.model, nn.Module):
        raise UsageError(f"audit() takes a torch.nn.Module or an ampkit.Workload; received {type(live.model).__name__}")
    if live.batch is None:
        raise UsageError("audit(model, batch=(inputs, targets)) needs a batch, or pass an ampkit.Workload")
    batch = live.batch
    return Workload(live.model.to(device), lambda *a: batch, loss_fn=live.loss_fn or cross_entropy), batch
