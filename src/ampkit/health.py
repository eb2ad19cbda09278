"""Loss-scale health: the alarm for a dynamic loss scale that collapses until training is silently dead.

Framework-neutral and host-only: it is fed values the caller already has on the host (the step
index, the loss scale after the step's update, whether the step was skipped), so it never adds a
host-device sync. ``ampkit.MixedPrecision`` feeds it from its host mirror of GradScaler's scale,
the Keras engine's callback from the values it logs, the trainer callbacks from the trainer's own
scaler at the syncs the trainer already makes."""

from __future__ import annotations

import math
import os
import sys
import warnings
from typing import Any

__all__ = ["LossScaleWarning", "LossScaleHealth", "DEFAULT_MIN_SCALE", "DEFAULT_CONSECUTIVE_SKIPS"]

DEFAULT_MIN_SCALE = 1.0
DEFAULT_CONSECUTIVE_SKIPS = 10


class LossScaleWarning(UserWarning):
    """The dynamic loss scale collapsed, or many steps in a row were skipped for inf/NaN gradients."""


def _fmt(x: float) -> str:
    return f"{x:.6g}"


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _stacklevel_outside_ampkit() -> int:
    """The ``stacklevel`` of the first frame outside the ampkit package, counted from the caller of
    this function's caller (``warnings.warn``'s view): the warning points at the user's line that
    stepped, however deep in ampkit the alarm was raised."""
    level, frame = 2, sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    return level


class LossScaleHealth:
    """Watches one run's loss scale and skipped steps; warns once when the scale collapses.

    Args:
        min_scale_warning: alarm when the scale falls below this (> 0).
        consecutive_skip_warning: alarm when this many steps in a row are skipped (int >= 1).
        advice: what to do, appended to the warning (the caller knows its framework: a bf16 line,
            the ``ampkit audit`` command line for this model), or a callable without arguments that
            returns it when the alarm fires (so it can name what is known only then). None: a
            generic sentence.
        source: who is speaking, for the message ("ampkit.MixedPrecision", "AmpkitCallback").
        warn: emit the :class:`LossScaleWarning` (False: only record it; ``report()`` still says it).
    """

    def __init__(self, *, min_scale_warning: float = DEFAULT_MIN_SCALE,
                 consecutive_skip_warning: int = DEFAULT_CONSECUTIVE_SKIPS,
                 advice: str | None = None, source: str = "ampkit", warn: bool = True) -> None:
        if isinstance(min_scale_warning, bool) or not isinstance(min_scale_warning, (int, float)) \
                or not math.isfinite(min_scale_warning) or min_scale_warning <= 0:
            raise ValueError(f"min_scale_warning must be a finite number > 0, received {min_scale_warning!r}")
        if isinstance(consecutive_skip_warning, bool) or not isinstance(consecutive_skip_warning, int) \
                or consecutive_skip_warning < 1:
            raise ValueError(f"consecutive_skip_warning must be an int >= 1, received {consecutive_skip_warning!r}")
        self.min_scale_warning = float(min_scale_warning)
        self.consecutive_skip_warning = int(consecutive_skip_warning)
        self.advice = advice
        self.source = source
        self.warn = warn
        self._reset()

    def _reset(self) -> None:
        self.steps = 0                 # steps observed
        self.skipped = 0               # of which skipped
        self.run_start: int | None = None   # first step of the current run of skipped steps
        self.run_length = 0
        self.scale: float | None = None
        self.last_good_scale: float | None = None  # the scale at which the last step was taken
        self.fired_at: int | None = None           # the step at which the alarm fired
        self.messages: list[str] = []

    # ------------------------------------------------------------------ feeding
    def observe(self, step: int, scale: float, skipped: bool, *, scale_used: float | None = None,
                forward_finite=None) -> str | None:
        """One optimizer step: its index, the scale *after* its update, whether it was skipped.

        ``scale_used``: the scale the step ran with (before the update), when known; it is what
        a taken step proves fits. ``forward_finite``: whether this step's loss was finite (a bool, or
        a callable without arguments asked only when the alarm fires: reading a device loss is a
        sync), None when unknown. Returns the alarm's message when this step fired it, else None.
        """
        self.steps += 1
        self.scale = float(scale)
        if skipped:
            self.skipped += 1
            if self.run_length == 0:
                self.run_start = int(step)
            self.run_length += 1
        else:
            self.run_length = 0
            self.run_start = None
            self.last_good_scale = float(scale_used if scale_used is not None else scale)
        if self.fired_at is not None:
            return None
        low = self.scale < self.min_scale_warning
        long_run = self.run_length >= self.consecutive_skip_warning
        if not (low or long_run):
            return None
        self.fired_at = int(step)
        msg = self._message(int(step), low, long_run, forward_finite() if callable(forward_finite) else forward_finite)
        self.messages.append(msg)
        if self.warn:
            warnings.warn(msg, LossScaleWarning, stacklevel=_stacklevel_outside_ampkit())
        return msg

    def _message(self, step: int, low: bool, long_run: bool, forward_finite: bool | None = None) -> str:
        what = []
        if long_run:
            what.append(f"{self.run_length} steps in a row were skipped for inf/NaN gradients "
                        f"(since step {self.run_start})")
        if low:
            what.append(f"the loss scale fell to {_fmt(self.scale)}, below {_fmt(self.min_scale_warning)}")
        head = f"{self.source}: loss scale collapsed at step {step}: " + " and ".join(what)
        head += "; every update since then was thrown away and training is not progressing."
        fit = (f" The last step that was taken ran at scale {_fmt(self.last_good_scale)}: "
               f"init_scale={_fmt(self.last_good_scale)} fits this model."
               if self.last_good_scale is not None else
               # a finite loss with gradients that overflow is a scale problem, never a forward one (issue #50)
               f" No step has been taken yet, and the loss is finite: the scaled gradients alone overflow at every "
               f"scale tried, down to {_fmt(self.scale)} (gradients too large for fp16: a large factor on the loss, or "
               "a weight gradient summed over a large batch); the scaler keeps halving, below 1 too, until they fit."
               if forward_finite else
               " No step has been taken yet, and the loss itself is inf/NaN: inf/NaN in the forward pass (not a "
               "scale problem)." if forward_finite is False else
               " No step has been taken yet: the gradients overflow at every scale tried, which points at "
               "inf/NaN in the forward pass or gradients too large for fp16 at any of those scales.")
        advice = self.advice() if callable(self.advice) else self.advice
        advice = advice or ("Use bf16 where the device supports it (no loss scaling needed), or find the "
                                 "overflowing layer with `ampkit audit --mode fp16`.")
        return head + fit + " " + advice

    # ------------------------------------------------------------------ reading
    @property
    def status(self) -> str:
        if self.fired_at is None:
            return "ok"
        dead = (self.scale is not None and self.scale < self.min_scale_warning) \
            or self.run_length >= self.consecutive_skip_warning
        return "collapsed" if dead else "warning"

    def report(self) -> dict[str, Any]:
        """``{"status", "messages", "steps", "skipped", "consecutive_skipped", "scale", "fired_at"}``:
        plain values (JSON-ready)."""
        return {"status": self.status, "messages": list(self.messages), "steps": self.steps,
                "skipped": self.skipped, "consecutive_skipped": self.run_length, "scale": self.scale,
                "fired_at": self.fired_at}

    # ------------------------------------------------------------------ resume
    def state_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "skipped": self.skipped, "run_start": self.run_start,
                "run_length": self.run_length, "scale": self.scale, "last_good_scale": self.last_good_scale,
                "fired_at": self.fired_at, "messages": list(self.messages)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._reset()
        for key in ("steps", "skipped", "run_length"):
            setattr(self, key, int(state.get(key, 0)))
        for key in ("run_start", "fired_at"):
            v = state.get(key)
            setattr(self, key, None if v is None else int(v))
        for key in ("scale", "last_good_scale"):
            v = state.get(key)
            setattr(self, key, None if v is None else float(v))
        self.messages = [str(m) for m in state.get("messages", [])]
