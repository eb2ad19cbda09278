"""``pickle`` and ``copy.deepcopy`` of an engine, the way ``torch.amp.GradScaler`` pickles."""

from __future__ import annotations

import math
import struct
import threading

from ....errors import UsageError
from .following import Followers
from .fp8 import FP8_REGION
from .regions import region_maker
from .watch import ContractWatch

__all__ = ["checked_state", "engine_state", "load_engine_state", "restore_engine"]

#: rebuilt on the copy, never copied
_LOCAL = ("model", "_followers", "_local", "_locator", "_new_region", "_watch")


def engine_state(mp) -> dict:
    """The picklable state of ``mp`` (``__getstate__``)."""
    return {k: v for k, v in mp.__dict__.items() if k not in _LOCAL}


def restore_engine(mp, state: dict) -> None:
    """Rebuild ``mp`` from :func:`engine_state` (``__setstate__``); ``locate_overflows`` is off (the
    class's own ``_locator``)."""
    mp.__dict__.update(state)
    mp.model = None
    mp._followers = Followers(hook=mp._scaling.follows_steps)
    mp._local = threading.local()
    # fp8 runs its regions in bf16 (FP8_REGION), not in its Precision's (a copy ran float32 before)
    mp._new_region = region_maker(FP8_REGION if mp._fp8 else mp.precision, mp.device.type, mp._math.region)
    mp._watch = ContractWatch()


def checked_state(state, mode: str) -> dict:
    """The state ``load_state_dict`` resumes from: an engine ``state_dict`` of this mode, or a
    ``torch.amp.GradScaler`` state_dict (fp16); anything else is one UsageError."""
    if not isinstance(state, dict):
        raise UsageError(f"load_state_dict() takes the dict of mp.state_dict(), received {type(state).__name__}")
    if "mode" not in state and "_growth_tracker" in state and "scale" in state:
        if mode != "fp16":  # a torch.amp.GradScaler's own state_dict: its scale, as GradScaler loads it
            raise UsageError(f"this is a torch.amp.GradScaler state_dict (fp16 loss scaling); the engine runs "
                             f"{mode!r}, which has no loss scale to resume")
        state = {"mode": mode, "scaler": state}
    if "mode" not in state:
        raise UsageError(f"load_state_dict(): not a MixedPrecision state_dict (no 'mode'; keys {sorted(state)[:6]})")
    if state.get("mode") != mode:
        raise UsageError(
            f"this state was saved in mode {state.get('mode')!r} but the engine runs {mode!r}; "
            "create MixedPrecision with the same mode to resume"
        )
    _check_values(state)
    return state


def _number(value, where: str, *, integer: bool = False, positive: bool = False) -> None:
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    ok = ok and not isinstance(value, bool) and math.isfinite(value) and (value > 0 if positive else value >= 0)
    if not ok:
        what = "a whole number >= 0" if integer else ("a finite number > 0" if positive else "a finite number >= 0")
        raise UsageError(f"load_state_dict(): corrupt state: {where} must be {what}, found {value!r}")


def _check_values(state: dict) -> None:
    """Every value the engine resumes from, before any is applied: a NaN or negative loss scale
    would load silently and the alarm would then report steps that were applied as thrown away."""
    for key in ("steps", "skipped"):
        if key in state:
            _number(state[key], key, integer=True)
    for key in ("scale_min", "scale_max"):
        if state.get(key) is not None:
            _number(state[key], key, positive=True)
    for key in ("health", "fp8"):
        if state.get(key) is not None and not isinstance(state[key], dict):
            raise UsageError(f"load_state_dict(): corrupt state: {key} must be a dict, found {type(state[key]).__name__}")
    scaler = state.get("scaler")
    if not scaler:
        return
    if not isinstance(scaler, dict):
        raise UsageError(f"load_state_dict(): corrupt state: scaler must be a GradScaler state_dict, "
                         f"found {type(scaler).__name__}")
    if "scale" not in scaler:
        raise UsageError("load_state_dict(): corrupt state: the scaler state has no 'scale'")
    _number(scaler["scale"], "the loss scale (scaler['scale'])", positive=True)
    if "_growth_tracker" in scaler:
        _number(scaler["_growth_tracker"], "scaler['_growth_tracker']", integer=True)
    rules = {"growth_factor": (lambda v: v > 1.0, "a number > 1"), "backoff_factor": (lambda v: 0 < v < 1, "in (0, 1)"),
             "growth_interval": (lambda v: isinstance(v, int) and v > 0, "a whole number > 0")}
    for key, (ok, what) in rules.items():  # the rules the constructor (and GradScaler) apply
        v = scaler.get(key)
        if key in scaler and not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and ok(v)):
            raise UsageError(f"load_state_dict(): corrupt state: scaler[{key!r}] must be {what}, found {v!r}")


def load_engine_state(mp, state) -> None:
    """``mp.load_state_dict(state)``: checked whole first (:func:`checked_state`), then applied; a
    part that still cannot be applied leaves the engine as it was and is one UsageError."""
    state = checked_state(state, mp.mode)
    before = mp.state_dict()
    try:
        _apply(mp, state)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, struct.error) as exc:
        _apply(mp, before)
        raise UsageError(f"load_state_dict(): corrupt state ({type(exc).__name__}: {exc}); the engine is unchanged")


def _apply(mp, state: dict) -> None:
    if mp._fp8:
        mp._fp8.load_state_dict(state.get("fp8"))
    mp._steps = int(state.get("steps", 0))
    mp._skipped = int(state.get("skipped", 0))
    mp._scaling.load_state_dict(state)
    if "health" in state:  # checkpoints from before the alarm load without it
        mp._health.load_state_dict(state["health"])
