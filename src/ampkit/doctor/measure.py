"""Interleaved rounds: how doctor times every mode against fp32, the same way for every framework.

A backend gives, per mode, its *work*: kernels (a matmul, a convolution) and short training steps
(a small conv net and a small transformer block through the engine), each a zero-argument
callable that has finished when it returns (or is timed by the backend's clock). This module

1. warms every op up once and calibrates how many reps fit a small time box,
2. runs rounds ``fp32, bf16, fp16 | fp16, bf16, fp32 | fp32, ...`` (the order flips every round, so
   a machine that slows down over the run does not favour whichever mode comes first),
3. keeps, per op and round, the fastest of its reps (on a shared CPU other jobs only ever add time),
4. pairs each mode's round with the fp32 of the same round (:mod:`ampkit.stats`), and
5. stops after ``max_rounds``, or after ``min_rounds`` once the time budget is spent; a mode whose
   interval already says "slower" (it can never be recommended) leaves the rounds early; from the
   second round on when it is many times slower (an emulated mode can take a second per training
   step on a CPU).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import one_line
from ..stats import SLOWER, Estimate, classify, ratio_estimate
from ..timing import HOST, Clock

KINDS = ("kernels", "training")
#: before min_rounds, a mode leaves the rounds only when its interval's high end is below this
EARLY_DROP = 0.6


@dataclass
class Work:
    """One mode's ops: ``{name: (callable, flops per call or None)}`` per kind."""

    kernels: dict[str, tuple[Callable[[], object], float | None]]
    training: dict[str, tuple[Callable[[], object], float | None]]
    clock: Clock = HOST
    notes: dict[str, str] = field(default_factory=dict)  # op -> why it was not timed
    #: ``at_size(n)``: a Work whose one kernel is an ``n``-square matmul in the mode's math, for
    #: ``speedup_by_size`` (:mod:`ampkit.doctor.sizes`); None: the backend measures no size table
    at_size: Callable[[int], Work] | None = None


@dataclass
class Plan:
    """How long to measure: rounds and time boxes (CPU defaults; a GPU backend passes its own)."""

    min_rounds: int = 5
    max_rounds: int = 9
    budget_s: float = 5.0      # for all rounds together, after warm-up
    op_box_s: float = 0.06     # reps of one op in one round fit this box (at least one rep)
    max_reps: int = 8


@dataclass
class Series:
    """One mode's measured rounds: ``rounds[i] = (round index, {kind: {op: seconds}})``."""

    rounds: list[tuple[int, dict[str, dict[str, float]]]] = field(default_factory=list)
    flops: dict[str, float | None] = field(default_factory=dict)
    error: str | None = None

    def times(self, kind: str, op: str) -> list[float]:
        return [t[kind][op] for _, t in self.rounds if op in t.get(kind, {})]


class _Timed:
    def __init__(self, fn: Callable[[], object], clock: Clock, plan: Plan):
        self.fn, self.clock = fn, clock
        t0 = time.perf_counter()
        fn()  # warm-up: first-call costs (kernel selection, tracing, allocation) stay out
        clock.sync()
        first = time.perf_counter() - t0
        if first < plan.op_box_s:  # a slow op (an emulated mode) gets one rep without a second look
            first = min(clock.time(fn, 1))
        self.reps = max(1, min(plan.max_reps, int(plan.op_box_s / max(first, 1e-6))))

    def __call__(self) -> float:
        return min(self.clock.time(self.fn, self.reps))


def _describe(exc: BaseException) -> str:
    return one_line(exc, 300)


def round_ratios(base: Series, other: Series, kind: str) -> list[float]:
    """Per round both measured: the summed time of the kind's ops in ``base`` over that in ``other``
    (one fixed mix of work, each op weighted by its time: a 3 ms step's scheduling noise cannot
    swamp what a 50 ms step measured)."""
    by_round = dict(base.rounds)
    out = []
    for idx, times in other.rounds:
        b = by_round.get(idx, {}).get(kind, {})
        ops = [op for op in times.get(kind, {}) if op in b]
        if ops:
            out.append(sum(b[op] for op in ops) / sum(times[kind][op] for op in ops))
    return out


def estimate(base: Series, other: Series, kind: str) -> Estimate | None:
    ratios = round_ratios(base, other, kind)
    return ratio_estimate(ratios) if ratios else None


def run_rounds(modes: list[str], work_for: Callable[[str], Work], plan: Plan, *, threshold: float,
               say: Callable[[str], None] | None = None, now: Callable[[], float] = time.perf_counter) -> dict[str, Series]:
    """Interleaved rounds of fp32 and ``modes``; a mode whose work fails gets a Series with ``error``."""
    say = say or (lambda msg: None)
    series: dict[str, Series] = {}
    timed: dict[str, dict[str, dict[str, _Timed]]] = {}
    for mode in ["fp32"] + [m for m in modes if m != "fp32"]:
        say(f"warm-up {mode}")
        s = series[mode] = Series()
        try:
            work = work_for(mode)
            timed[mode] = {kind: {op: _Timed(fn, work.clock, plan) for op, (fn, _) in getattr(work, kind).items()}
                           for kind in KINDS}
            s.flops = {op: fl for kind in KINDS for op, (_, fl) in getattr(work, kind).items()}
        except Exception as exc:  # reported on the mode, never fatal
            s.error = _describe(exc)
            if mode == "fp32":
                return series
    active = [m for m in timed if m != "fp32"]
    t0 = now()
    for r in range(plan.max_rounds):
        if not active or (r >= plan.min_rounds and now() - t0 > plan.budget_s):
            break
        say(f"round {r + 1}")
        order = ["fp32", *active] if r % 2 == 0 else [*reversed(active), "fp32"]
        for mode in order:
            try:
                times = {kind: {op: t() for op, t in ops.items()} for kind, ops in timed[mode].items()}
            except Exception as exc:
                series[mode].error = _describe(exc)
                if mode == "fp32":
                    return series
                active.remove(mode)
                continue
            series[mode].rounds.append((r, times))
        if r + 1 >= 2:
            for mode in list(active):
                ests = [e for e in (estimate(series["fp32"], series[mode], kind) for kind in KINDS) if e is not None]
                # from min_rounds: slower by the threshold; before: only many times slower (an emulated
                # mode), which two noisy rounds cannot fake
                if any(classify(e, threshold) == SLOWER and (r + 1 >= plan.min_rounds or e.high < EARLY_DROP)
                       for e in ests):
                    active.remove(mode)  # it can never be recommended; more rounds would not change that
    return series


def op_table(base: Series, s: Series) -> dict:
    """Per op: median seconds over the rounds, TFLOP/s where the FLOPs are known, speedup vs fp32."""
    out = {}
    for kind in KINDS:
        ops = {op for _, t in s.rounds for op in t.get(kind, {})}
        for op in sorted(ops):
            xs = sorted(s.times(kind, op))
            med = xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2
            row = {"kind": kind, "seconds": med}
            flops = s.flops.get(op)
            if flops:
                row["tflops"] = flops / med / 1e12
            one = Series([(i, {kind: {op: t[kind][op]}}) for i, t in s.rounds if op in t.get(kind, {})])
            est = estimate(base, one, kind) if s is not base else None
            if est is not None and math.isfinite(est.point):
                row["speedup"], row["speedup_ci"] = round(est.point, 4), est.ci
            out[op] = row
    return out
