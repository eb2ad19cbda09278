"""What the trainer callbacks hand to experiment trackers, at the trainer's own logging cadence.

Each logging event of the trainer (HuggingFace ``on_log``, Lightning's logging steps, Keras's
batch and epoch ``logs``) gets, from values the callback holds already (no device read of its
own):

* ``amp/loss_scale`` — the loss scale after the last recorded step (only when a scaler exists);
* ``amp/skipped_steps`` — skipped optimizer steps since the start of the run (a resumed run
  continues the count of its checkpoint);
* ``amp/skipped_in_window`` — skipped steps since the previous logging event;
* ``amp/first_nonfinite`` — only in the window in which the run's first inf/NaN was found: the
  global step (1-based) it happened at (the module, phase and rank are in the document and
  ``cb.summary``; trackers take numbers).

They go through the trainer's channel, so every tracker the user configured receives them (the
HuggingFace ``report_to`` integrations, every Lightning logger, Keras's ``CSVLogger`` and
``TensorBoard``); no entry of the trainer's own history is replaced.
"""

from __future__ import annotations

__all__ = ["TrackerWindow", "PREFIX"]

PREFIX = "amp/"


class TrackerWindow:
    """The tracker values of one record between two logging events."""

    def __init__(self) -> None:
        self._skipped_seen = 0
        self._first_sent = False

    def reset(self, record=None) -> None:
        """A new run (or a resumed one: what the checkpoint held counts as already logged)."""
        self._skipped_seen = len(record.skipped) if record is not None else 0
        self._first_sent = bool(record is not None and record.first)

    def metrics(self, record) -> dict[str, float]:
        """The values of this logging event; the window starts anew."""
        if record is None:
            return {}
        out: dict[str, float] = {}
        if record.scales:
            out[PREFIX + "loss_scale"] = float(record.scales[-1])
        total = len(record.skipped)
        out[PREFIX + "skipped_steps"] = float(total)
        out[PREFIX + "skipped_in_window"] = float(total - self._skipped_seen)
        self._skipped_seen = total
        if record.first and not self._first_sent:
            self._first_sent = True
            out[PREFIX + "first_nonfinite"] = float(record.first.get("step") or 0)
        return out
