"""``pickle`` and ``copy.deepcopy`` of an engine, the way ``torch.amp.GradScaler`` pickles.

What travels: the mode, the device, the arguments, the loss scaling (GradScaler's ``state_dict``:
scale, growth tracker, factors; the host mirror with its min/max), the step counters, the
accumulation position and the loss-scale alarm (:mod:`.alarm`). The copy continues exactly where the
original was: the same scale, skips and alarm, step after step.

What does not: the model given to ``prepare`` and the optimizers the engine has followed, with the
step post-hooks it put on them. They belong to the original: its hooks stay on its optimizers and keep
working; the copy holds no model (``copy.prepare(model)`` gives it one, e.g. the model's own copy)
and follows an optimizer afresh, with hooks of its own, the first time it steps it. Likewise
``locate_overflows()`` is off in the copy and the contract watch (:mod:`.watch`) is not armed.
Copying between ``unscale``/``step`` and the scale update is refused, as GradScaler refuses it.
"""

from __future__ import annotations

import threading

from ....errors import UsageError
from .following import Followers
from .regions import region_maker
from .watch import ContractWatch

__all__ = ["checked_state", "engine_state", "restore_engine"]

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
    mp._new_region = region_maker(mp.precision, mp.device.type, mp._math.region)
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
    return state
