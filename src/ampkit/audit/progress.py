"""The audit's progress: one plain line per pass on stderr, so a long audit in a log says where it is.

An audit step is an fp32 reference and the audited pass (again at each halved scale while loss
scaling backs off); a what-if step is one float32 step. Each is one line, with its time and the time
since the audit started, written by the process that runs the passes (the CLI's isolated child) and
flushed at once -- after the pass, never before: a model that fails in its first pass (bad input,
a crash) still ends in the one ``ampkit: error:`` line. The library (``ampkit.audit(...)``) prints nothing.
"""

from __future__ import annotations

import sys
import time


class PassLines:
    """``say(text)`` -> ``ampkit audit: <text> (<pass> s; <total> s in all)`` on stderr."""

    def __init__(self, stream=None):
        self.stream = stream
        self.start = self.last = time.perf_counter()

    def __call__(self, text: str) -> None:
        now = time.perf_counter()
        took, self.last = now - self.last, now
        print(f"ampkit audit: {text} ({took:.1f} s; {now - self.start:.0f} s in all)",
              file=self.stream or sys.stderr, flush=True)


def quiet(text: str) -> None:
    """No progress (the library's audit)."""
