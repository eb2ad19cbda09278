"""``ampkit audit --mode fp8`` for PyTorch: what torchao's fp8 layers do to the numerics, layer by layer.

Each audited step runs the same batch, weights and random numbers three times: an fp32 reference,
bf16 (``MixedPrecision("bf16")``) and fp8 (``MixedPrecision("fp8")`` on a copy of the model whose
eligible Linear layers torchao converted, emulated where the hardware has no fp8). For every Linear
it records, in the report's ``layers[i]["fp8"]``:

* ``output`` and ``weight_grad``: relative errors ``||x - x_fp32|| / ||x_fp32||`` (:mod:`ampkit.compare`) of the layer's
  output and of its weight gradient, for fp8 and bf16 against fp32, and fp8 against bf16 (what
  fp8 adds on top of bf16);
* ``casts`` (converted layers): for its input, its weight and the gradient of its output, the fp8
  dtype the recipe casts to and the shares of nonzero values that saturate (beyond the format's max
  after scaling) or are flushed to zero, with the recipe's own scaling (dynamic, per tensor for
  tensorwise, per row for rowwise);
* ``advice``: rowwise scaling where tensorwise flushes or errs and torchao's rowwise recipe, run on the
  same step (``rowwise``: its output error), was measured to help; bf16 for a layer whose fp8 error
  stands out.

Each layer's ``rel_error`` and ``input_rel_error`` are filled as in fp16/bf16: its fp8 output and
input against the fp32 reference's.

Between audited steps the fp8 step trains the model (AdamW on the fp32 master weights), so later
steps see later weights; :meth:`Fp8AuditSession.close` gives the model back as it came.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import torch
import torch.nn as nn

from ...audit.ops import Advice, AuditSession, StepOutcome
from ...audit.report import LayerStats
from ...formats import BF16
from .engine import MixedPrecision
from .environment import torch_environment
from .numerics.compare import tensor_relative_error
from .numerics.replay import ModelState, snapshot
from .numerics.replay import restore as _restore
from .numerics.replay import same_randomness as _same_randomness

#: an fp8 layer's output error above this (relative, vs fp32) gets advice...
OUTPUT_ERROR_LIMIT = 0.10
#: ...and so does one whose error is this many times bf16's: e4m3 keeps 4 fewer mantissa bits than bf16, so about
#: 16x is fp8 working as designed; beyond twice that, the layer is one fp8 hurts more than the rest
RATIO_LIMIT = 32.0
#: a cast that flushes more than this share of its nonzero values to zero gets advice
FLUSH_LIMIT = 0.01
#: rowwise scaling is advised where its measured output error is at most this share of tensorwise's
ROWWISE_GAIN = 0.8


def _fp32_hint(device_type: str):
    """Code that keeps one module in float32 under autocast, from outside the model's source."""
    def hint(name: str) -> str:
        return (f"m = model.get_submodule({name!r})\n"
                "m.register_forward_pre_hook(lambda mod, args: tuple(a.float() if isinstance(a, torch.Tensor) "
                "and a.is_floating_point() else a for a in args))\n"
                f"m.forward = torch.autocast({device_type!r}, enabled=False)(m.forward)")
    return hint


def _rel(x: torch.Tensor | None, ref: torch.Tensor | None) -> float | None:
    """The audit's one rule (:mod:`ampkit.compare`) with bf16's floor: fp8 training's layers output bf16."""
    return tensor_relative_error(x, ref, BF16)


def cast_shares(x: torch.Tensor, dtype: torch.dtype, rowwise: bool, power_of_2: bool) -> dict:
    """The fp8 cast of ``x`` as the recipe scales it (amax -> the format's max, per tensor or per row
    of the last dimension): shares of its nonzero values that saturate and that are flushed to zero.
    Dynamic scaling maps the amax onto the max, so nothing saturates unless a scale is stale; the
    flushed share is what one scale for many values of different magnitudes costs."""
    x = x.detach().float().reshape(-1, x.shape[-1]) if x.dim() > 1 else x.detach().float().reshape(1, -1)
    fmax = torch.finfo(dtype).max
    amax = x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax()
    scale = fmax / amax.clamp(min=1e-12)
    if power_of_2:
        scale = torch.exp2(torch.floor(torch.log2(scale)))
    y = x * scale
    nonzero = x != 0
    n = int(nonzero.sum())
    saturated = (y.abs() > fmax * (1 + 1e-5)) & nonzero  # the amax itself lands on the max, give or take a rounding
    flushed = (y.clamp(-fmax, fmax).to(dtype).float() == 0) & nonzero
    return {"dtype": str(dtype).replace("torch.", ""), "saturated_frac": float(saturated.sum()) / n if n else 0.0,
            "flushed_frac": float(flushed.sum()) / n if n else 0.0}


class _Pass:
    """One pass's Linear outputs, inputs, output gradients and weight gradients, by layer name."""

    def __init__(self, model: nn.Module, names: list[str]):
        self.mods = dict(model.named_modules())
        self.names = names
        self.out, self.inp, self.gout, self.wgrad, self.calls = {}, {}, {}, {}, {}
        self._hooks = [self.mods[n].register_forward_hook(self._hook(n)) for n in names]

    def _hook(self, name: str):
        def fwd(mod, args, out):
            if not isinstance(out, torch.Tensor):
                return
            self.calls[name] = self.calls.get(name, 0) + 1
            self.out[name] = out.detach().float()
            self.inp[name] = args[0].detach() if args and isinstance(args[0], torch.Tensor) else None
            if out.requires_grad:
                out.register_hook(lambda g: self.gout.__setitem__(name, g.detach().float()))
        return fwd

    def finish(self) -> _Pass:
        for h in self._hooks:
            h.remove()
        for n in self.names:
            g = self.mods[n].weight.grad
            self.wgrad[n] = None if g is None else g.detach().float().clone()
        return self


def _run(model, workload, batch, mp: MixedPrecision, names, device, seed) -> tuple[_Pass, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    rec = _Pass(model, names)
    try:
        with _same_randomness(device, seed):
            with mp.autocast():
                loss = workload.loss(batch)
            mp.backward(loss)
    finally:
        rec.finish()
    return rec, loss.detach()


class Fp8AuditSession(AuditSession):
    """:class:`ampkit.audit.ops.AuditSession` for ``--mode fp8`` (see the module docstring)."""

    initial_scale = 1.0

    def __init__(self, workload, batch, mode: str, device, *, lr: float | None = None, seed: int = 0,
                 notes: tuple[str, ...] = (), recipe: str | None = None, plan: dict | None = None):
        self.workload_obj, self.batch, self.dev, self.seed = workload, batch, device, seed
        self.device, self.workload = str(device), workload.name
        model = self.model = workload.model
        self._kept = ModelState(model)
        model.train()
        # a plan: its fp32 islands on the model (the bf16 and fp32 passes run them too); its entries stay out of fp8
        from .engine.islands import hook_plan

        self._islands = hook_plan(plan, model, device)
        self.mp8 = MixedPrecision("fp8", device, fp8_recipe=recipe, keep_fp32=self._islands.plan if plan else None)
        self.m8 = self.mp8.prepare(copy.deepcopy(model))
        self.w8 = dataclasses.replace(workload, model=self.m8)
        self.layers_info = {d["name"]: d for d in self.mp8.fp8_layers}
        self.names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
        self.opt = torch.optim.AdamW(model.parameters(), lr=lr if lr is not None else workload.lr)
        kind = "emulated (no fp8 hardware here: numerics only)" if self.mp8.emulated else "fp8 kernels"
        self.recipe = self.mp8.state_dict()["fp8"]["recipe"]
        self.notes = (*notes, f"fp8 {self.recipe} through torchao, {kind}; "
                              f"{sum(d['converted'] for d in self.mp8.fp8_layers)} of {len(self.names)} Linear "
                              "layers converted (layers[i].fp8 says why for each)")
        self._layers: dict[str, LayerStats] = {}
        self._run = None
        self._seed = seed
        self._rowwise = None  # (engine, model, workload) of the rowwise check, made when first needed

    # ---------------------------------------------------------------- the driver's operations
    def measure(self, step: int, scale: float) -> StepOutcome:
        model, seed = self.model, self.seed + step
        self._seed = seed
        buffers = snapshot(model)
        ref, ref_loss = _run(model, self.workload_obj, self.batch, MixedPrecision("fp32", self.dev), self.names, self.dev, seed)
        _restore(buffers)
        low, _ = _run(model, self.workload_obj, self.batch, MixedPrecision("bf16", self.dev), self.names, self.dev, seed)
        _restore(buffers)
        model.zero_grad(set_to_none=True)
        self.m8.load_state_dict(model.state_dict())
        f8, loss8 = _run(self.m8, self.w8, self.batch, self.mp8, self.names, self.dev, seed)
        self._run = (ref, low, f8, buffers)
        first = next(({"name": n, "phase": "forward"} for n in self.names
                      if n in f8.out and not bool(torch.isfinite(f8.out[n]).all())), None)
        back = any(g is not None and not bool(torch.isfinite(g).all()) for g in f8.wgrad.values())
        if first is None and back:
            first = next({"name": n, "phase": "backward"} for n in reversed(self.names)
                         if f8.wgrad.get(n) is not None and not bool(torch.isfinite(f8.wgrad[n]).all()))
        return StepOutcome(first is not None and first["phase"] == "forward", back,
                           not math.isfinite(float(ref_loss)), first)

    def rewind(self) -> None:
        _restore(self._run[3])
        self.model.zero_grad(set_to_none=True)

    def record(self) -> None:
        ref, low, f8, _ = self._run
        for n in self.names:
            if n not in ref.out:
                continue
            info = self.layers_info.get(n or "(root)", {})
            lay = self._layers.setdefault(n, LayerStats(n, type(self.m8.get_submodule(n)).__name__, leaf=True))
            lay.calls += ref.calls.get(n, 0)
            lay.fwd_amax = max(lay.fwd_amax, float(ref.out[n].abs().max()) if ref.out[n].numel() else 0.0)
            if n in ref.gout:
                lay.grad_amax = max(lay.grad_amax, float(ref.gout[n].abs().max()) if ref.gout[n].numel() else 0.0)
            if n in f8.out:
                lay.fwd_nonfinite += int((~torch.isfinite(f8.out[n])).sum())
                lay.fwd_dtype = str(f8.out[n].dtype).replace("torch.", "")
            entry = lay.fp8 if isinstance(getattr(lay, "fp8", None), dict) else {
                "converted": bool(info.get("converted")), "reason": info.get("reason")}
            for part, (a, b, r) in (("output", (f8.out, low.out, ref.out)), ("weight_grad", (f8.wgrad, low.wgrad, ref.wgrad))):
                errs = {"fp8_vs_fp32": _rel(a.get(n), r.get(n)), "bf16_vs_fp32": _rel(b.get(n), r.get(n)),
                        "fp8_vs_bf16": _rel(a.get(n), b.get(n))}
                old = entry.get(part) or {}
                entry[part] = {k: _max(old.get(k), v) for k, v in errs.items()}
            if entry["converted"]:
                entry["casts"] = self._casts(n, f8, entry.get("casts"))
            lay.fp8 = entry
            # the per-layer contract of every mode: the output's and the inputs' error against fp32
            lay.rel_error = _max(lay.rel_error, _rel(_f(f8.out.get(n)), ref.out.get(n)))
            lay.input_rel_error = _max(lay.input_rel_error, _rel(_f(f8.inp.get(n)), _f(ref.inp.get(n))))
        self._check_rowwise(ref)

    def _check_rowwise(self, ref: _Pass) -> None:
        """Where a tensorwise layer has advice rowwise scaling might fix, run the step once more with
        torchao's rowwise recipe (a copy of the model, the same weights and random numbers) and keep
        each converted layer's rowwise output error: the advice then says what was measured."""
        want = [n for n in self.names if n in self._layers and wants_rowwise_check(self._layers[n].fp8, self.recipe)]
        if not want:
            return
        if self._rowwise is None:
            mp = MixedPrecision("fp8", self.dev, fp8_recipe="rowwise")
            m = mp.prepare(copy.deepcopy(self.model))
            self._rowwise = (mp, m, dataclasses.replace(self.workload_obj, model=m))
        mp, m, wl = self._rowwise
        m.load_state_dict(self.model.state_dict())  # the step's weights and buffers, as the fp8 pass started
        rw, _ = _run(m, wl, self.batch, mp, self.names, self.dev, self._seed)
        m.zero_grad(set_to_none=True)
        for n in want:
            entry = self._layers[n].fp8
            err = _rel(_f(rw.out.get(n)), ref.out.get(n))
            entry["rowwise"] = {"fp8_vs_fp32": _max((entry.get("rowwise") or {}).get("fp8_vs_fp32"), err)}

    def _casts(self, name: str, f8: _Pass, old: dict | None) -> dict:
        mod = self.m8.get_submodule(name)
        cfg = getattr(mod, "config", None)
        if cfg is None:
            return old or {}
        rowwise = "AXISWISE" in str(cfg.cast_config_input.scaling_granularity).upper()
        p2 = bool(getattr(cfg, "round_scales_to_power_of_2", False))
        out = {}
        for part, tensor, cast in (("input", f8.inp.get(name), cfg.cast_config_input),
                                   ("weight", mod.weight, cfg.cast_config_weight),
                                   ("grad_output", f8.gout.get(name), cfg.cast_config_grad_output)):
            if tensor is None:
                continue
            now = cast_shares(tensor, cast.target_dtype, rowwise, p2)
            prev = (old or {}).get(part)
            if prev:
                now = {**now, **{k: max(prev[k], now[k]) for k in ("saturated_frac", "flushed_frac")}}
            out[part] = now
        return out

    def train(self, scale: float) -> None:
        """The fp8 step: the fp8 pass's gradients onto the fp32 master weights, AdamW steps."""
        grads = dict(self.m8.named_parameters())
        for name, p in self.model.named_parameters():
            g = grads[name].grad if name in grads else None
            p.grad = None if g is None else g.detach().clone()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        with torch.no_grad():  # the buffers the fp8 pass updated (BatchNorm statistics) carry on
            for b, b8 in zip(self.model.buffers(), self.m8.buffers()):
                b.copy_(b8)
        self.m8.zero_grad(set_to_none=True)
        self._run = None

    def layers(self) -> list[LayerStats]:
        out = [self._layers[n] for n in self.names if n in self._layers]
        for lay in out:
            lay.fp8["advice"] = fp8_advice(lay.name, lay.fp8, self.recipe)
        return out

    def advice(self) -> Advice:
        kind = self.dev.type
        return Advice(_fp32_hint(kind), "GradScaler", "init_scale",
                      lambda s: f"scaler = torch.amp.GradScaler({kind!r}, init_scale={s:g})",
                      f'mp = ampkit.MixedPrecision("bf16", device={kind!r})')

    def environment(self) -> dict:
        return torch_environment(self.dev)

    def close(self) -> None:
        self._run = None
        self.m8 = self.w8 = self._rowwise = None
        if self._islands is not None:
            self._islands.remove()
        self._kept.restore()


def _f(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.float()


def _max(a, b):
    vals = [v for v in (a, b) if v is not None]
    return max(vals) if vals else None


def _flushed(entry: dict) -> tuple[float, str]:
    return max(((c.get("flushed_frac", 0.0), part) for part, c in (entry.get("casts") or {}).items()), default=(0.0, ""))


def _harmed(entry: dict) -> bool:
    out = entry.get("output") or {}
    e8, e16 = out.get("fp8_vs_fp32"), out.get("bf16_vs_fp32")
    return e8 is not None and (e8 > OUTPUT_ERROR_LIMIT or bool(e16 and e8 > RATIO_LIMIT * e16 and e8 > 0.02))


def wants_rowwise_check(entry: dict, recipe: str) -> bool:
    """Whether a tensorwise layer has advice that rowwise scaling might fix: then it is measured."""
    return recipe == "tensorwise" and bool(entry.get("converted")) and (
        _flushed(entry)[0] > FLUSH_LIMIT or _harmed(entry))


def rowwise_helps(entry: dict) -> bool:
    """Measured, not assumed: torchao's rowwise recipe on the same step cut the layer's output error
    vs fp32 to at most :data:`ROWWISE_GAIN` of tensorwise's."""
    e8 = (entry.get("output") or {}).get("fp8_vs_fp32")
    rw = (entry.get("rowwise") or {}).get("fp8_vs_fp32")
    return e8 is not None and rw is not None and rw <= ROWWISE_GAIN * e8


def fp8_advice(name: str, entry: dict, recipe: str) -> str | None:
    """What to do about one layer, or None when fp8 does it no visible harm. Rowwise scaling is
    advised only where it was measured to help (``entry["rowwise"]``, :func:`rowwise_helps`)."""
    if not entry.get("converted"):
        return None
    out = entry.get("output") or {}
    e8, e16 = out.get("fp8_vs_fp32"), out.get("bf16_vs_fp32")
    flushed, worst = _flushed(entry)
    keep = (f"keep it in bf16: MixedPrecision('fp8', fp8_filter=lambda module, name: name != {name!r})")
    rw = (entry.get("rowwise") or {}).get("fp8_vs_fp32")
    if recipe == "tensorwise" and rw is not None:
        tried = (f"try fp8_recipe='rowwise' (measured: its output error {rw:.2%} against tensorwise's {e8:.2%}), or "
                 if rowwise_helps(entry) else
                 f"fp8_recipe='rowwise' does not help here (measured: {rw:.2%} against tensorwise's {e8:.2%}); ")
    else:
        tried = ""
    if recipe == "tensorwise" and flushed > FLUSH_LIMIT:
        return (f"{flushed:.1%} of the nonzero values of its {worst} are flushed to zero by one scale for the "
                f"whole tensor: {tried}{keep}")
    if _harmed(entry):
        return f"its output differs from fp32 by {e8:.1%} in fp8 against {e16 or 0:.2%} in bf16: {tried}{keep}"
    return None
