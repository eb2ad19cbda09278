"""``bench --repeats N`` and ``--modes ...,auto``: what happens around the per-mode runs.

Repeats: the mode sequence runs N times, interleaved (``fp32, bf16 | bf16, fp32 | fp32, bf16``: the
order flips every repeat so drift over the run favours no mode), each run in a fresh process as
always. Per mode the repeats are folded into one row: the median samples/s and step times (on the
log scale, so samples/s stays batch size over step time), TFLOP/s and MFU, the largest peak memory.
``speedup_vs_fp32`` is then the ratio of the folded samples/s -- the same statistic as for one run --
and its interval a bootstrap over the repeats resampled in pairs (:mod:`ampkit.bench.judge`).

auto: ``auto`` resolves once, in the parent, to the mode the backend's ``resolve_auto`` picks for
the device. That mode runs in auto's place; when it is already in the list it runs once, and its
row says that auto chose it (``resolved_from: "auto"`` and the reason).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..precision import AUTO
from .judge import median
from .report import BenchRow, derive_relative


@dataclass(frozen=True)
class AutoChoice:
    """The modes that run, once ``auto`` is resolved, and what it resolved to (None: not asked for)."""

    modes: tuple[str, ...]
    mode: str | None = None
    reason: str | None = None


def apply_auto(modes, resolve: Callable[[], tuple[str, str]]) -> AutoChoice:
    """``modes`` with ``auto`` replaced by the mode ``resolve()`` picks (called once, only when asked
    for); a mode already listed runs once."""
    if AUTO not in modes:
        return AutoChoice(tuple(modes))
    mode, reason = resolve()
    resolved: list[str] = []
    for m in modes:
        m = mode if m == AUTO else m
        if m not in resolved:
            resolved.append(m)
    return AutoChoice(tuple(resolved), mode, reason)


def mark_auto(rows: list[BenchRow], auto: AutoChoice) -> None:
    """The row of auto's mode says that auto chose it, and why."""
    for r in rows:
        if auto.mode is not None and r.mode == auto.mode:
            r.resolved_from, r.resolved_reason = AUTO, auto.reason


def sequence(modes, repeats: int) -> list[tuple[int, str]]:
    """(repeat, mode) in the order they run: the sequence, reversed every other repeat."""
    return [(k, m) for k in range(repeats) for m in (modes if k % 2 == 0 else list(reversed(modes)))]


def _median(xs):
    xs = [x for x in xs if x is not None and x > 0]
    return median(xs) if xs else None


def fold(runs: dict[str, list[BenchRow]], modes, repeats: int, sets: int = 1) -> list[BenchRow]:
    """One row per mode from its repeats (in ``modes`` order); paired speedups when N > 1. ``sets``:
    the rounds were split over that many sets of processes (:func:`.rounds.process_sets`, one repeat):
    an ok row's timed and skipped steps are every set's together (so "every timed step skipped" is
    judged over all of them), a failed row's those of the set it failed in."""
    rows = []
    for mode in modes:
        got = runs.get(mode, [])
        if not got:
            continue
        bad = next((r for r in got if r.status != "ok"), None)
        row = BenchRow.from_dict(bad.to_dict() if bad else got[0].to_dict())
        row.repeats = repeats
        row.runs = [r.samples_per_s if r.status == "ok" else None for r in got]
        row.step_times_ms = [t for r in got for t in (r.step_times_ms or [])]
        if any(r.round_ms for r in got):  # interleaved runs: their rounds pool (an interrupted run is the last)
            row.round_ms = [t for r in got for t in (r.round_ms or [])]
            row.rounds = len(row.round_ms)
            row.processes = len(got)
            row.rounds_per_process = [len(r.round_ms or []) for r in got]
        if sets > 1 and bad is None:
            row.steps = sum(r.steps or 0 for r in got)
            row.skipped_steps = sum(r.skipped_steps or 0 for r in got)
        elif bad is None:  # repeats: each ran every step
            row.skipped_steps = max(r.skipped_steps or 0 for r in got)
        row.warmup_skipped_steps = max(r.warmup_skipped_steps or 0 for r in got)
        if bad is None and len(got) > 1:
            row.samples_per_s = _median([r.samples_per_s for r in got])
            row.step_ms = {k: _median([r.step_ms.get(k) for r in got]) for k in got[0].step_ms}
            row.tflops = _median([r.tflops for r in got])
            row.mfu = _median([r.mfu for r in got])
            row.peak_memory_bytes = max((r.peak_memory_bytes or 0) for r in got) or None
        rows.append(row)
    return rows


def paired_speedups(runs: dict[str, list[BenchRow]], rows: list[BenchRow]) -> None:
    """speedup_vs_fp32 (the ratio of the folded samples/s) with its interval from the repeats,
    resampled in pairs with the fp32 run of the same repeat."""
    derive_relative(rows, runs)
