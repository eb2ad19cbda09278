"""Interleaved rounds: how doctor times every mode against fp32, the same way for every framework.

A backend gives, per mode, its *work*: kernels (a matmul, a convolution) and short training steps
(a small conv net and a small transformer block through the engine), each a zero-argument
callable that has finished when it returns (or is timed by the backend's clock). This module

1. warms every op up once and calibrates how many reps fit a small time box,
2. runs rounds ``fp32, bf16, fp16 | fp16, bf16, fp32 | fp32, ...`` (the order flips every round, so
   a machine that slows down over the run does not favour whichever mode comes first),
3. keeps, per op and round, the fastest of its reps (on a shared CPU other jobs only ever add time),
4. pairs each mode's round with the fp32 of the same round (:mod:`ampkit.stats`), and
5. lets each mode leave as soon as its verdict is decided (:mod:`ampkit.rounds_sequential`: the interval rule of
   :mod:`ampkit.doctor.verdicts` at a confidence corrected for looking after every round), and stops the rest at
   ``max_rounds`` (the cap), or after ``min_rounds`` once the time budget is spent (decided modes
   leave from ``first_look`` on, undecided ones get the rounds as before).

Before all that, a *screen look* (:meth:`_Rounds.screen`): two rounds of the cheapest kernel alone
(the matmul; at ``Plan.screen_n``, 256², where the Works can be sized), with only it warmed up. A
mode it shows slower at the corrected confidence (an emulated fp16 on a CPU: 60x slower, and a
second per training step) leaves decided, its convolution and training steps never warmed up or
timed; it can never be recommended, and more rounds would not change that. Where training steps
are costly to build (traced Keras steps), a mode the screen saw slower without deciding gets a
*kernel look* first (:meth:`_Rounds.kernel_look`). Each Series says why it stopped (``stopped``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import one_line
from .rounds_sequential import (
    ACCELERATED,
    NO_DIFFERENCE,
    SCREEN_DROP,
    SCREEN_ROUNDS,
    corrected_confidence,
    interval,
    mode_decision,
    pair_settled,
    planned_looks,
)
from .stats import SLOWER, Estimate, ratio_estimate
from .timing import HOST, Clock

KINDS = ("kernels", "training")
#: ``Series.screened`` of a mode :meth:`_Rounds.kernel_look` decided: all its kernels, no training step
KERNELS_ALONE = "matmul/conv"


@dataclass
class Work:
    """One mode's ops: ``{name: (callable, flops per call or None)}`` per kind. A callable with a true
    ``builds_on_first_call`` attribute builds itself on its first call (a traced training step: only
    a mode that gets that far pays for it) and is warmed up by a second call. What a backend's
    ``doctor_work`` returns (:class:`ampkit.doctor.ops.DoctorOps`) and what ``auto``'s quick check times."""

    kernels: dict[str, tuple[Callable[[], object], float | None]]
    training: dict[str, tuple[Callable[[], object], float | None]]
    clock: Clock | None = None  # None: the host's clock (ampkit.timing.HOST)
    notes: dict[str, str] = field(default_factory=dict)  # op -> why it was not timed
    #: ``at_size(n)``: a Work whose one kernel is an ``n``-square matmul in the mode's math, for
    #: ``speedup_by_size`` (:mod:`ampkit.doctor.sizes`); None: the backend measures no size table
    at_size: Callable[[int], Work] | None = None


@dataclass
class Plan:
    """How long to measure: rounds and time boxes (CPU defaults; a GPU backend passes its own)."""

    min_rounds: int = 5        # the fewest rounds before the time budget may end them (undecided modes)
    max_rounds: int = 9        # the cap
    budget_s: float = 5.0      # for all rounds together, after warm-up
    op_box_s: float = 0.06     # reps of one op in one round fit this box (at least one rep)
    max_reps: int = 5         # the fastest of up to 5 back-to-back calls a round (8 before #41)
    #: the first look (:mod:`ampkit.rounds_sequential`): a mode may leave decided from this round on
    first_look: int = 3
    #: False: no screen look and no early stop, every mode to the cap or the budget (the rounds as
    #: they were before :mod:`ampkit.rounds_sequential`; what a test compares the sequential verdicts with)
    sequential: bool = True
    #: the screen look's matmul size where every screened Work can be sized (``Work.at_size``); None:
    #: the screen times the main op itself. An emulated mode is as many times slower at 256² as at
    #: 512², and its one call there costs an eighth (on a CPU without AVX512-FP16: 15 ms, not 120)
    screen_n: int | None = 256


@dataclass
class Series:
    """One mode's measured rounds: ``rounds[i] = (round index, {kind: {op: seconds}})``."""

    rounds: list[tuple[int, dict[str, dict[str, float]]]] = field(default_factory=list)
    flops: dict[str, float | None] = field(default_factory=dict)
    error: str | None = None
    #: why its rounds ended: "decided: slower" | "decided: accelerated" | "decided: no measurable
    #: difference" | "cap" (max_rounds) | "cap: time budget" | "error"; None for fp32 (the baseline)
    stopped: str | None = None
    #: the op of the screen look that decided it (its other ops were never timed), else None
    screened: str | None = None
    #: fp32's rounds this series is paired with when not fp32's main ones (the screen's), else None
    baseline: list[tuple[int, dict[str, dict[str, float]]]] | None = None
    #: the size of the screen's ``n``-square matmul when it was not the main one's (``Plan.screen_n``)
    screen_size: int | None = None

    def times(self, kind: str, op: str) -> list[float]:
        return [t[kind][op] for _, t in self.rounds if op in t.get(kind, {})]


class _Timed:
    def __init__(self, fn: Callable[[], object], clock: Clock, plan: Plan):
        self.fn, self.clock = fn, clock
        if getattr(fn, "builds_on_first_call", False):  # a lazily built op (Work): the build is not the warm-up
            fn()
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
    by_round = dict(other.baseline if other.baseline is not None else base.rounds)
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
    """Interleaved rounds of fp32 and ``modes``, each mode leaving as soon as its verdict is decided
    (:mod:`ampkit.rounds_sequential`); a mode whose work fails gets a Series with ``error``. Every Series says why
    its rounds stopped (``stopped``)."""
    say = say or (lambda msg: None)
    series: dict[str, Series] = {}
    works: dict[str, Work] = {}
    for mode in ["fp32"] + [m for m in modes if m != "fp32"]:
        s = series[mode] = Series()
        try:
            works[mode] = work = work_for(mode)
            s.flops = {op: fl for kind in KINDS for op, (_, fl) in getattr(work, kind).items()}
        except Exception as exc:  # reported on the mode, never fatal
            s.error, s.stopped = _describe(exc), "error"
            if mode == "fp32":
                return series
    screen = _screen_op(works) if plan.sequential else None
    late = screen is not None and any(getattr(fn, "builds_on_first_call", False) for m, w in works.items()
                                      if m != "fp32" for fn, _ in w.training.values())
    looks = planned_looks(plan.first_look, plan.max_rounds, screen is not None) + (1 if late else 0)
    rounds = _Rounds(series, works, plan, threshold, corrected_confidence(looks), say)
    rounds.active = [m for m in works if m != "fp32"]
    if screen is not None and rounds.active:
        doubtful = rounds.screen(screen)
        if late and doubtful:
            rounds.kernel_look(doubtful)
    rounds.main(now)
    return series


def _screen_op(works: dict[str, Work]) -> str | None:
    """The op of the screen look: fp32's first kernel, where some mode has more to time than it
    (an emulated mode then leaves after two rounds of its cheapest kernel, before its convolution and
    training steps are even warmed up)."""
    base = works.get("fp32")
    if base is None or not base.kernels:
        return None
    op = next(iter(base.kernels))
    has_more = any(m != "fp32" and op in w.kernels and len(w.kernels) + len(w.training) > 1 for m, w in works.items())
    return op if has_more else None


class _Rounds:
    """The rounds of one :func:`run_rounds`: the timers (warmed up when first needed), the active modes."""

    def __init__(self, series, works, plan: Plan, threshold: float, confidence: float, say):
        self.series, self.works, self.plan, self.say = series, works, plan, say
        self.threshold, self.confidence = threshold, confidence
        self.timed: dict[str, dict[str, dict[str, _Timed]]] = {m: {kind: {} for kind in KINDS} for m in works}
        self.active: list[str] = []
        self.index = 0  # the next round's index (the screen's rounds come first)

    def _warm(self, mode: str, ops: dict[str, list[str]], work: Work | None = None, timed: dict | None = None) -> bool:
        work = self.works[mode] if work is None else work
        timed = self.timed if timed is None else timed
        try:
            for kind, names in ops.items():
                for op in names:
                    if op not in timed[mode][kind]:
                        timed[mode][kind][op] = _Timed(getattr(work, kind)[op][0], work.clock or HOST, self.plan)
        except Exception as exc:
            self._fail(mode, exc)
            return False
        return True

    def _fail(self, mode: str, exc: BaseException) -> None:
        self.series[mode].error, self.series[mode].stopped = _describe(exc), "error"
        if mode in self.active:
            self.active.remove(mode)

    def _round(self, ops_of: Callable[[str], dict[str, list[str]]], series_of: Callable[[str], Series],
               modes: list[str] | None = None, timed: dict | None = None) -> bool:
        """One interleaved round over fp32 and ``modes`` (the active ones); False when fp32 failed."""
        r = self.index
        self.index += 1
        modes = self.active if modes is None else modes
        timed = self.timed if timed is None else timed
        order = ["fp32", *modes] if r % 2 == 0 else [*reversed(modes), "fp32"]
        for mode in order:
            try:
                times = {kind: {op: timed[mode][kind][op]() for op in names} for kind, names in ops_of(mode).items()}
            except Exception as exc:
                self._fail(mode, exc)
                if mode == "fp32":
                    return False
                continue
            series_of(mode).rounds.append((r, times))
        return True

    def screen(self, op: str) -> list[str]:
        """The screen look: fp32 and every mode on ``op`` alone for SCREEN_ROUNDS rounds; a mode that
        is slower on it at the corrected confidence, and many times slower (high end < SCREEN_DROP),
        leaves, decided. The others start afresh: their
        screen rounds are not counted (one kernel is not the kernels' mix), nor are fp32's: a screened
        mode pairs with them through ``Series.baseline``. Returns the modes left in that looked slower
        (point below 1): the ones :meth:`kernel_look` reads."""
        ops = {"kernels": [op]}
        candidates = [m for m in self.active if op in self.works[m].kernels]  # a mode without the op goes on
        sized = self._screen_works(op, ["fp32", *candidates])
        works = sized or self.works
        timed = {m: {kind: {} for kind in KINDS} for m in works} if sized else self.timed
        self.say(f"screen {op}" + (f" {self.plan.screen_n}²" if sized else ""))
        for mode in ["fp32", *candidates]:
            if not self._warm(mode, ops, works[mode], timed) and mode == "fp32":
                self.active = []
                return []
        screened = [m for m in candidates if m in self.active]
        trial = {m: Series() for m in ["fp32", *screened]}
        for _ in range(SCREEN_ROUNDS):
            if not self._round(lambda m: ops, lambda m: trial[m], [m for m in screened if m in self.active], timed):
                self.active = []
                return []
        doubtful = []
        for mode in [m for m in screened if m in self.active]:
            ratios = round_ratios(trial["fp32"], trial[mode], "kernels")
            wide = interval(ratios, self.confidence)
            if wide is not None and wide.point < 1:
                doubtful.append(mode)
            if mode_decision(ratios, [], self.threshold, self.confidence) == SLOWER and wide.high < SCREEN_DROP:
                s = self.series[mode]
                s.rounds, s.baseline = trial[mode].rounds, trial["fp32"].rounds
                s.stopped, s.screened = f"decided: {SLOWER}", op
                if sized:  # its matmul's figures (op table, TFLOP/s) are the screen's size
                    s.flops[op], s.screen_size = sized[mode].kernels[op][1], self.plan.screen_n
                self.active.remove(mode)
                doubtful.remove(mode)
        return doubtful

    def kernel_look(self, modes: list[str]) -> None:
        """Where training steps are costly to build (a traced ``tf.function``: seconds each), ``modes``
        (those the screen saw slower without deciding) first run ``first_look`` rounds of their kernels
        alone beside fp32; one that is slower on them at the corrected confidence (the rule of every
        look: kernels slower decide a mode slower) leaves, decided, its training steps never built.
        The others start afresh, as after the screen (these rounds are not counted)."""
        kernels = {m: {"kernels": list(self.works[m].kernels)} for m in ["fp32", *modes]}
        modes = [m for m in modes if kernels[m]["kernels"]]
        for mode in ["fp32", *modes]:
            if not self._warm(mode, kernels[mode]) and mode == "fp32":
                self.active = []
                return
        trial = {m: Series() for m in ["fp32", *modes]}
        for r in range(self.plan.first_look):
            self.say(f"kernels round {r + 1}")
            if not self._round(lambda m: kernels[m], lambda m: trial[m], [m for m in modes if m in self.active]):
                self.active = []
                return
        for mode in [m for m in modes if m in self.active]:
            if mode_decision(round_ratios(trial["fp32"], trial[mode], "kernels"), [], self.threshold,
                             self.confidence) == SLOWER:
                s = self.series[mode]
                s.rounds, s.baseline = trial[mode].rounds, trial["fp32"].rounds
                s.stopped, s.screened = f"decided: {SLOWER}", KERNELS_ALONE
                self.active.remove(mode)

    def _screen_works(self, op: str, modes: list[str]) -> dict[str, Work]:
        """The screen's smaller Works (``Plan.screen_n``), where every mode's Work can be sized and
        names ``op`` alike; else {} (the screen times the main op)."""
        n = self.plan.screen_n
        if not n or not self.plan.sequential or any(self.works[m].at_size is None for m in modes):
            return {}
        try:
            sized = {m: self.works[m].at_size(n) for m in modes}
        except Exception:  # the main op is timed instead; its own failure is reported there
            return {}
        return sized if all(op in w.kernels for w in sized.values()) else {}

    def main(self, now: Callable[[], float]) -> None:
        """Rounds of every op until each mode is decided, the cap (``max_rounds``), or the time budget
        (after ``min_rounds``)."""
        all_ops = {m: {kind: list(getattr(w, kind)) for kind in KINDS} for m, w in self.works.items()}
        for mode in ["fp32", *self.active]:
            self.say(f"warm-up {mode}")
            if not self._warm(mode, all_ops[mode]) and mode == "fp32":
                return
        t0 = now()
        first, least = min(self.plan.first_look, self.plan.max_rounds), min(self.plan.min_rounds, self.plan.max_rounds)
        why = "cap"
        for r in range(self.plan.max_rounds):
            if not self.active:
                return
            if r >= least and now() - t0 > self.plan.budget_s:
                why = "cap: time budget"
                break
            self.say(f"round {r + 1}")
            if not self._round(lambda m: {k: v for k, v in all_ops[m].items() if v}, lambda m: self.series[m]):
                return
            if r + 1 >= first and self.plan.sequential:
                self._look()
        for mode in self.active:
            self.series[mode].stopped = why

    def _ratios(self, mode: str, kind: str) -> list[float]:
        return round_ratios(self.series["fp32"], self.series[mode], kind)

    def _look(self) -> None:
        decided = {m: mode_decision(self._ratios(m, "kernels"), self._ratios(m, "training"), self.threshold,
                                    self.confidence) for m in self.active}
        for mode, d in decided.items():
            if d in (SLOWER, NO_DIFFERENCE):
                self._leave(mode, d)
        for mode, d in decided.items():
            if d != ACCELERATED:
                continue
            rivals = [m for m in self.active if m != mode]  # still measured: each may yet be recommended
            if all(pair_settled(round_ratios(self.series[r], self.series[mode], "training"), self.threshold,
                                self.confidence) for r in rivals):
                self._leave(mode, d)

    def _leave(self, mode: str, decision: str) -> None:
        self.series[mode].stopped = f"decided: {decision}"
        self.active.remove(mode)


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
            one = Series([(i, {kind: {op: t[kind][op]}}) for i, t in s.rounds if op in t.get(kind, {})],
                         baseline=s.baseline)  # a screened mode pairs with the screen's fp32
            est = estimate(base, one, kind) if s is not base else None
            if est is not None and math.isfinite(est.point):
                row["speedup"], row["speedup_ci"] = round(est.point, 4), est.ci
            out[op] = row
    return out
