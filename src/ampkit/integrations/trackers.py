"""What the trainer callbacks hand to experiment trackers, at the trainer's own logging cadence."""

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
