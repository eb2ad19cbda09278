"""Timing that is right on every device, and the summaries every command reports.

A *clock* times calls: :data:`HOST` with perf_counter, for work that has finished when the call
returns (CPU work, TensorFlow's ``.numpy()``); a backend supplies one for its accelerator (PyTorch's
CUDA clock records events and synchronises once, outside the timed region). Warm-up calls are
excluded everywhere."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    def sync(self) -> None: ...

    def time(self, fn: Callable[[], object], reps: int) -> list[float]: ...


class HostClock:
    """perf_counter around each call; nothing to synchronise."""

    def sync(self) -> None:
        pass

    def time(self, fn: Callable[[], object], reps: int) -> list[float]:
        out = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
        return out


HOST = HostClock()


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def percentile(xs: list[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    if len(s) == 1:
        return s[0]
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def step_ms_summary(step_s: list[float]) -> dict:
    """Step times (seconds) as the bench row reports them: milliseconds, p50/p90/mean/min/max."""
    ms = [s * 1e3 for s in step_s]
    return {"p50": percentile(ms, 50), "p90": percentile(ms, 90), "mean": sum(ms) / len(ms),
            "min": min(ms), "max": max(ms)}
