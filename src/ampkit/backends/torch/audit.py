"""``ampkit.audit`` for PyTorch: per-module numerics of a mixed-precision step against an fp32 reference.

Each step runs the model twice on the same batch and the same weights: an fp32 reference
(TF32 off) and the audited mode through ``ampkit.MixedPrecision`` at a FIXED loss scale. Hooks
record, per module call: forward output magnitude, the share of the reference's nonzero values
that the mode's format flushes to zero or subnormal, non-finite values, relative error against
the reference; and the same for gradients w.r.t. module outputs, at the given loss scale. Parameter
gradients are watched as ``GradScaler.unscale_`` checks them (:mod:`.numerics.params`): the reference
takes the true ones (their amax), the audited pass's ``.grad`` is checked for inf/NaN, and a step
with one is a step a real scaler skips.
After the audited step the optimizer steps (through the engine), so later steps see later weights.

Memory: the reference run's outputs are kept (float32) to compare against, so an audited step
needs about twice the activation memory of a plain one.
"""

from __future__ import annotations

import keyword
import math
from dataclasses import dataclass

import torch
import torch.nn as nn

from ...audit.ops import Advice, AuditSession, StepOutcome, session_kind
from ...audit.report import LayerStats, merge_dtypes
from ...errors import one_line
from ...formats import UNDERFLOW_THRESHOLD, format_of, lost_below, module_limit
from .audit_batch import live_workload, session_inputs
from .engine import MixedPrecision
from .engine.contract import audit_findings
from .engine.islands import hook_plan
from .environment import torch_environment
from .numerics.hooks import Recorder, origin_backward
from .numerics.noise import noise_shares, underflow_candidates
from .numerics.origin import step_origin
from .numerics.output import output_finding
from .numerics.params import ParamGrads, add_param_stats, param_origin
from .numerics.probes import InputProbe, StepProbe
from .numerics.replay import ModelState, snapshot
from .numerics.replay import restore as _restore
from .numerics.replay import same_randomness as _same_randomness
from .workloads import Workload

#: GradScaler's default init_scale: an fp16 audit looks at what a default run sees
DEFAULT_LOSS_SCALE = 2.0**16
#: the audit engine's min_scale_warning: below any scale the back-off reaches (ampkit.audit.driver.MIN_SCALE)
QUIET_ALARM = 2.0**-126


def _run(model, workload, batch, mp: MixedPrecision, probe: StepProbe, params: ParamGrads | None = None):
    """One pass; the reference (``params`` given) returns its parameters' gradient amaxes too."""
    reference = probe.reference is None
    param_amax: dict = {}
    with Recorder(model, probe.on_forward, probe.on_grad, grad_inputs=not reference) as rec:
        with mp.autocast():
            loss = workload.loss(batch)
        if reference:
            # the reference takes gradients w.r.t. module outputs and parameters (the true gradients the
            # scaled ones are judged by) in one call, leaving .grad alone
            targets = rec.grad_targets
            weights = params.tensors if params is not None else []
            if (targets or weights) and loss.requires_grad:
                grads = torch.autograd.grad(loss, [*targets, *weights], allow_unused=True)
                param_amax = params.reference(grads[len(targets):]) if weights else {}
        else:
            mp.backward(loss)
    return rec.order, {"depth": rec.depth, "leaf": rec.leaf, "types": rec.types, "param_amax": param_amax}


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
    param_bad: dict    # {parameter name: inf/NaN count} of the audited pass's (scaled) .grad

    @property
    def forward_nonfinite(self) -> bool:
        return any(r[0] > 0 for rows in self.fwd.values() for r in rows)

    @property
    def backward_nonfinite(self) -> bool:
        return any(e[3] for e in self.events)

    @property
    def reference_nonfinite(self) -> bool:
        return any(not math.isfinite(st[0]) for d in (self.ref_fwd, self.ref_grad) for v in d.values() for st in v)


def _audited_step(model, workload, batch, mode, fmt, scale, device, seed, buffers, params: ParamGrads) -> _StepRun:
    """One step at loss scale ``scale``: the fp32 reference (same weights, same random numbers, no
    optimizer step; the buffers it updates, BatchNorm's running statistics, are put back), then the
    audited mode at that fixed scale (a fresh engine keeps the scale where it was asked); a pass
    that saw inf/NaN runs again counting them exactly. Gradients are left in ``.grad``."""
    ref_probe = StepProbe(fmt, scale, None)
    with _same_randomness(device, seed):
        order, meta = _run(model, workload, batch, MixedPrecision("fp32", device), ref_probe, params)
    _restore(buffers)
    model.zero_grad(set_to_none=True)
    ref_fwd, ref_grad, _ = ref_probe.host()
    meta["ref_dtypes"] = ref_probe.dtypes
    exact = False
    while True:
        # the audit's own engine: its loss-scale alarm stays quiet (a scale below 1 is what the back-off
        # found, said in the report; a user's warning from inside the audit would contradict it)
        mp = MixedPrecision(mode, device, init_scale=scale, model=model, min_scale_warning=QUIET_ALARM)
        probe = StepProbe(fmt, scale, ref_probe, exact=exact)
        with _same_randomness(device, seed):
            order2, _ = _run(model, workload, batch, mp, probe)
        fwd, grad, events = probe.host()
        if exact or not probe.saw_nonfinite:
            return _StepRun(order2, order, meta, ref_fwd, ref_grad, fwd,
                            grad, events, mp, probe.dtypes, params.nonfinite())
        exact = True
        _restore(buffers)
        model.zero_grad(set_to_none=True)


class TorchAuditSession(AuditSession):
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
        # the caller's model comes back as it was: the audit trains it (AdamW, so later steps see later
        # weights) on copies' worth of memory, then puts parameters, buffers and .grad back
        self._kept = ModelState(model)
        model.train()
        self._islands = hook_plan(plan, model, device)  # a precision plan's float32 islands, on the model itself
        self.opt = torch.optim.AdamW(model.parameters(), lr=lr if lr is not None else workload.lr)
        self._layers: dict[str, LayerStats] = {}
        self._names: list[str] = []
        self._step, self._buffers, self._run, self._scale = None, None, None, 1.0
        self._contract: list | None = None  # the precision contract after the first trained step (#22)
        self._params = ParamGrads(model)
        self._param_overflow: dict[str, float] = {}  # parameter -> largest measured scale its gradient was inf/NaN at
        self._ref_out: set = set()  # the model output's dtypes in the float32 reference
        self._noise_checked: set = set()  # modules whose gradients were checked against float64

    def measure(self, step: int, scale: float) -> StepOutcome:
        if self._step != step:  # what the reference and each retry start from
            self._step, self._buffers = step, snapshot(self.model)
        args = (self.model, self.workload_obj, self.batch)
        try:
            run = _audited_step(*args, self.mode, self.fmt, scale, self.dev, self.seed + step, self._buffers,
                                self._params)
        except Exception as exc:
            _fails_in_fp32_too(*args, self.dev, self.seed + step, self._buffers, exc)
            raise
        self._run, self._scale = run, scale
        first = next(({"name": k[0], "phase": "forward"} for k in run.order
                      if any(s[0] > 0 for s in run.fwd.get(k, []))), None)
        if first is None:
            first = origin_backward(run.events, run.meta["depth"], {k: i for i, k in enumerate(run.order)})
        first = step_origin(self.model, first, run, lambda engine: self._replay(engine, step),
                            MixedPrecision("fp32", self.dev))
        for name in run.param_bad:
            self._param_overflow[name] = max(self._param_overflow.get(name, 0.0), scale)
        if first is None and run.param_bad:  # only a parameter's gradient: what GradScaler alone would see
            first = param_origin(run.param_bad)
        amax = max([*run.meta["param_amax"].values(), *(st[0] for rows in run.ref_grad.values() for st in rows)],
                   default=None)
        return StepOutcome(run.forward_nonfinite, run.backward_nonfinite or bool(run.param_bad), run.reference_nonfinite,
                           first, params_nonfinite=bool(run.param_bad), grad_amax=amax)

    def _replay(self, engine: MixedPrecision, step: int) -> None:
        """The measured step's forward again (same randomness), for :func:`.numerics.origin.step_origin`."""
        with _same_randomness(self.dev, self.seed + step), engine.autocast():
            self.workload_obj.loss(self.batch)

    def rewind(self) -> None:
        _restore(self._buffers)
        self.model.zero_grad(set_to_none=True)

    def record(self) -> None:
        run, meta, layers = self._run, self._run.meta, self._layers
        candidates = {k[0] for k, rows in run.fwd.items() if meta["leaf"].get(k[0], True)
                      and any(len(r) > 1 and r[0] == 0 and r[1] > module_limit(self.fmt) for r in rows)}
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
        add_param_stats(layers, meta["param_amax"], run.param_bad, self._param_overflow, self._scale)
        self._ref_out |= meta["ref_dtypes"].get("", set())
        for name, kinds in run.dtypes.items():
            if name in layers:
                merge_dtypes(layers[name], kinds)
        self._check_noise(run)

    def _check_noise(self, run) -> None:
        """Underflow candidates' float32 gradients against float64, once per module (numerics.noise)."""
        names = underflow_candidates(run.ref_grad, UNDERFLOW_THRESHOLD) - self._noise_checked
        if not names:
            return
        self._noise_checked |= names
        shares = noise_shares(self.model, self.workload_obj, self.batch, names, self.dev, self.seed + self._step,
                              self._buffers, lost_below(self.fmt) / self._scale)
        for name, (noise, lost) in shares.items():
            lay = self._layers.get(name)
            if lay is not None:
                lay.grad_noise_frac, lay.grad_signal_lost_frac = noise, lost

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
        """Findings of kind ``"contract"`` (engine.contract.audit_findings, and a low-precision output
        layer: numerics.output), read by the driver."""
        out = output_finding(self.layers(), self._ref_out, self.model, lambda n: module_expr(self.model, n),
                             torch_fp32_hint(self.model, self.dev.type))
        return (self._contract or []) + ([out] if out else [])

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
        self._kept.restore()


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


class TorchAudit:
    """:class:`ampkit.audit.ops.AuditOps` for PyTorch: the session of each kind is the backend's
    ``audit_sessions`` table (:class:`ampkit.backends.torch.backend.TorchBackend`)."""

    def audit_session(self, config, target, live=None) -> TorchAuditSession:
        device = torch.device(target.device)
        cls = self.audit_sessions[session_kind(config)]
        kw = {"plan": config.plan} if config.plan else {}  # a precision plan to audit under
        if live is not None:
            workload, batch, fed = live_workload(live, device)
            session = cls(workload, batch, config.mode, device, lr=live.lr, seed=config.seed, **kw)
        else:
            workload, batch, notes, fed = session_inputs(config, device)
            session = cls(workload, batch, config.mode, device, seed=config.seed, notes=notes, **kw)
        session.input = fed
        return session
