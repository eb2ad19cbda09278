"""A precision plan on a PyTorch model: float32 islands and the Linear layers kept out of fp8.

Outputs are left in float32: the next op under autocast casts them back where it computes in the
mode's dtype (a Linear, a conv, a matmul: autocast's cast list); ops that promote (an add with a
float16 tensor) run in float32. Nothing is added to a step beyond one Python call per island (no sync)."""

from __future__ import annotations

import torch

from ....errors import UsageError
from ....plan_format import Plan, keep_fp32_plan, load_plan

__all__ = ["Islands", "PlanFront", "check_plan", "engine_plan", "hook_plan", "islands_for", "raise_unapplied"]


def engine_plan(mode: str, keep_fp32) -> Plan | None:
    """The plan of ``MixedPrecision(mode, keep_fp32=...)`` (:func:`ampkit.plan_format.keep_fp32_plan`)."""
    return keep_fp32_plan(mode, keep_fp32, "torch")


def unwrapped(model):
    """The user's model inside DDP/DataParallel or ``torch.compile``: plan names are its own names."""
    model = getattr(model, "_orig_mod", model)
    if type(model).__name__ in ("DistributedDataParallel", "DataParallel"):
        model = model.module
    return model


def check_plan(plan, model) -> None:
    """Refuse, in one line naming the entry, a plan (dict or Plan) for another framework or with an
    entry matching no module of ``model`` -- before anything is run with it."""
    if plan:
        load_plan(plan, "torch").resolve((n, type(m).__name__) for n, m in unwrapped(model).named_modules())


def _to_fp32(value):
    if isinstance(value, torch.Tensor):
        return value.float() if value.is_floating_point() and value.dtype != torch.float32 else value
    if isinstance(value, (tuple, list)):
        return type(value)(_to_fp32(v) for v in value) if not hasattr(value, "_fields") else value
    if isinstance(value, dict):
        return {k: _to_fp32(v) for k, v in value.items()}
    return value


class KeptForward:
    """A kept module's ``forward``: autocast off and its floating inputs in float32 around the original
    (a ``with`` block, so an exception restores autocast and ``torch.compile`` traces it)."""

    def __init__(self, forward, device_type: str) -> None:
        self.forward, self.device_type = forward, device_type

    def __call__(self, *args, **kwargs):
        with torch.autocast(self.device_type, enabled=False):
            return self.forward(*_to_fp32(args), **_to_fp32(kwargs))


class Islands:
    """One engine's plan on its model: the resolved entries and the hooks of the fp32 islands."""

    def __init__(self, plan: Plan, device_type: str) -> None:
        self.plan, self.device_type = plan, device_type
        self.resolved: dict[str, tuple[str, str]] = {}   # module name -> (mode, pattern), after apply
        self.kept: list[str] = []                         # outermost modules kept in float32
        self.applied = False
        self._handles: list = []

    def apply(self, model: torch.nn.Module) -> None:
        """Resolve the plan on ``model`` (one line for an entry matching nothing) and hook its islands."""
        self.remove()
        model = unwrapped(model)
        named = [(n, type(m).__name__) for n, m in model.named_modules()]
        self.resolved = self.plan.resolve(named)
        self.kept = self.plan.outermost(self.resolved, "fp32")
        modules = dict(model.named_modules())
        for name in self.kept:
            mod = modules[name]
            if not isinstance(mod.__dict__.get("forward"), KeptForward):  # one island per module, however many engines
                mod.forward = KeptForward(mod.forward, self.device_type)
                self._handles.append(mod)
        self.applied = True

    def remove(self) -> None:
        for mod in self._handles:
            if isinstance(mod.__dict__.get("forward"), KeptForward):
                del mod.forward  # the class's forward again
        self._handles = []
        self.applied = False

    def in_fp32(self, name: str) -> bool:
        """Whether a module (by qualified name) runs inside a float32 island."""
        return any(name == k or name.startswith(k + ".") for k in self.kept)

    def fp8_verdict(self, name: str, module) -> str | None:
        """Why the plan keeps this Linear out of fp8 (its entry, or the island holding it), else None."""
        hit = self.plan.mode_of(name, type(module).__name__)
        if hit is not None:
            return f"kept out of fp8 by the plan (entry {hit[1]!r}: {hit[0]})"
        inside = next((k for k in self.kept if name.startswith(k + ".")), None)
        if inside is not None:
            return f"kept out of fp8 by the plan (inside {inside!r}, kept in fp32)"
        return None

    def __getstate__(self):  # a copy of the engine holds no model, so no hooks
        return {"plan": self.plan, "device_type": self.device_type, "resolved": {}, "kept": [], "applied": False,
                "_handles": []}


def islands_for(mp, keep_fp32) -> Islands | None:
    """The engine's islands for ``keep_fp32`` (patterns, or a plan from ``from_plan``); fp8 then asks them."""
    plan = engine_plan(mp.precision.mode, keep_fp32)
    if plan is None:
        return None
    if plan.default != mp.precision.mode:  # from_plan: the plan's default is the mode
        raise UsageError(f"plan default {plan.default!r} but the engine runs {mp.precision.mode!r}")
    islands = Islands(plan, mp.device.type)
    if mp._fp8:
        mp._fp8.plan_verdict = islands.fp8_verdict
    return islands


def raise_unapplied():
    raise UsageError("keep_fp32 / a plan names modules of the model: give it with MixedPrecision(..., "
                     "model=model) or mp.prepare(model) before the first forward")


def hook_plan(plan, model, device) -> Islands | None:
    """A plan's float32 islands hooked on ``model`` itself (every engine then runs them; the audit's
    sessions do this), or None; ``.remove()`` takes them off."""
    if not plan:
        return None
    islands = Islands(load_plan(plan, "torch"), device.type)
    islands.apply(model)
    return islands


class PlanFront:
    """``MixedPrecision.from_plan`` and ``mp.plan`` (the engine's precision-plan surface)."""

    _islands = None

    @classmethod
    def from_plan(cls, plan, device="auto", **kwargs):
        """The engine a precision plan asks for: its default mode, its modules kept in float32 (or,
        under fp8, out of fp8). ``plan``: a path to its JSON file, the dict, or an :class:`ampkit.plan.Plan`;
        other keywords as for the constructor (``model=`` applies it at once, else ``prepare``).

        Raises:
            UsageError: a malformed plan, a plan for Keras, an unknown mode (one line naming the entry);
                at ``prepare``, an entry matching no module of the model.
        """
        if "keep_fp32" in kwargs:
            raise UsageError("from_plan() takes the modules from the plan; keep_fp32= is for MixedPrecision(mode, ...)")
        loaded = load_plan(plan, "torch")
        return cls(loaded.default, device, keep_fp32=loaded, **kwargs)

    @property
    def plan(self) -> Plan:
        """The :class:`ampkit.plan.Plan` in force: the mode as its default and the modules kept in
        float32 (or out of fp8); no modules when none were asked for."""
        if self._islands is None:
            return Plan(self.mode, {}, "torch")
        return self._islands.plan
