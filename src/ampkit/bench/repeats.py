"""``bench --repeats N`` and ``--modes ...,auto``: what happens around the per-mode runs.

Repeats: the mode sequence runs N times, interleaved (``fp32, bf16 | bf16, fp32 | fp32, bf16``: the
order flips every repeat so drift over the run favours no mode), each run in a fresh process as
always. Per mode the repeats are folded into one row: the median samples/s, step times, TFLOP/s
and MFU, the largest peak memory, and ``speedup_vs_fp32`` from the *paired* per-repeat ratios
(this mode's samples/s over the fp32 samples/s of the same repeat) -- their median and its
bootstrap interval (:mod:`ampkit.stats`), so the interval always contains the reported speedup.

auto: ``auto`` resolves once, in the parent, to the mode the backend's ``resolve_auto`` picks for
the device. That mode runs in auto's place; when it is already in the list it runs once, and its
row says that auto chose it (``resolved_from: "auto"`` and the reason).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from ..precision import AUTO
from ..stats import ratio_estimate
from .config import BenchConfig
from .report import BenchRow


def apply_auto(cfg: BenchConfig, resolve: Callable[[], tuple[str, str]]) -> None:
    """Replace ``auto`` in ``cfg.modes`` by the mode it resolves to (once); remember the choice."""
    if AUTO not in cfg.modes:
        return
    mode, reason = resolve()
    modes: list[str] = []
    for m in cfg.modes:
        m = mode if m == AUTO else m
        if m not in modes:
            modes.append(m)
    cfg.modes = modes
    cfg.auto_mode, cfg.auto_reason = mode, reason


def mark_auto(rows: list[BenchRow], cfg: BenchConfig) -> None:
    for r in rows:
        if cfg.auto_mode is not None and r.mode == cfg.auto_mode:
            r.resolved_from, r.resolved_reason = AUTO, cfg.auto_reason


def sequence(modes: list[str], repeats: int) -> list[tuple[int, str]]:
    """(repeat, mode) in the order they run: the sequence, reversed every other repeat."""
    return [(k, m) for k in range(repeats) for m in (modes if k % 2 == 0 else list(reversed(modes)))]


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fold(runs: dict[str, list[BenchRow]], modes: list[str], repeats: int) -> list[BenchRow]:
    """One row per mode from its repeats (in ``modes`` order); paired speedups when N > 1."""
    rows = []
    for mode in modes:
        got = runs.get(mode, [])
        if not got:
            continue
        bad = next((r for r in got if r.status != "ok"), None)
        row = BenchRow.from_dict(bad.to_dict() if bad else got[0].to_dict())
        row.repeats = repeats
        row.runs = [r.samples_per_s if r.status == "ok" else None for r in got]
        if bad is None and len(got) > 1:
            row.samples_per_s = _median([r.samples_per_s for r in got])
            row.step_ms = {k: _median([r.step_ms.get(k) for r in got]) for k in got[0].step_ms}
            row.tflops = _median([r.tflops for r in got])
            row.mfu = _median([r.mfu for r in got])
            row.peak_memory_bytes = max((r.peak_memory_bytes or 0) for r in got) or None
        rows.append(row)
    return rows


def paired_speedups(runs: dict[str, list[BenchRow]], rows: list[BenchRow]) -> None:
    """speedup_vs_fp32 and speedup_ci from per-repeat ratios vs the fp32 run of the same repeat."""
    base = runs.get("fp32", [])
    for row in rows:
        if row.status != "ok" or row.mode == "fp32" or not base:
            if row.mode == "fp32" and row.status == "ok":
                row.speedup_ci = [1.0, 1.0] if len(base) > 1 else None
            continue
        ratios = [r.samples_per_s / b.samples_per_s for r, b in zip(runs[row.mode], base)
                  if r.status == "ok" and b.status == "ok" and r.samples_per_s and b.samples_per_s]
        if len(ratios) < 2:
            continue
        est = ratio_estimate(ratios)
        row.speedup_vs_fp32, row.speedup_ci = est.point, est.ci
