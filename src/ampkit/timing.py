"""Timing that is right on both devices.

CUDA: events around each call and ONE synchronize at the end (a host-device sync, deliberate,
outside the timed region). CPU: perf_counter around each call. Warm-up calls are excluded.
"""

from __future__ import annotations

import statistics
import time
from types import SimpleNamespace
from typing import Callable


#: a stand-in device for code whose calls have finished when they return (TensorFlow's
#: ``.numpy()``, CPU work): timed with perf_counter, never synchronised
HOST = SimpleNamespace(type="cpu")


def synchronize(device) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)  # host-device sync: only at measurement boundaries


def time_calls(fn: Callable[[], object], device, *, warmup: int = 1, min_reps: int = 2,
               max_reps: int = 50, budget_s: float = 0.5) -> list[float]:
    """Seconds per call of ``fn`` for a number of reps chosen to fit ``budget_s``."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    t0 = time.perf_counter()  # calibration call, also timed
    fn()
    synchronize(device)
    first = time.perf_counter() - t0
    reps = max(min_reps, min(max_reps, int(budget_s / max(first, 1e-6))))
    if device.type == "cuda":
        import torch

        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for start, end in events:
            start.record()
            fn()
            end.record()
        synchronize(device)
        return [start.elapsed_time(end) / 1e3 for start, end in events]
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


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
