"""Where a mode's gain lives: its matmul against fp32's at small, medium and large sizes.

The doctor's ``speedup_by_size`` and ``bench --explain``'s size table come from here, the same way:
for each size (ascending) fp32 and the mode run the doctor's interleaved rounds
(:func:`ampkit.rounds.run_rounds`) on an ``n``-square matmul, giving a speedup and its 95%
interval. A size whose one call would take longer than ``max_call_s`` (predicted from the size
below it: a matmul's time grows as n³) is left out, with the reason, so that an emulated mode
(fp16 on a CPU without AVX512-FP16: seconds per 1024² matmul) does not hold up the run.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..rounds import Plan, Work, estimate, run_rounds

CPU_SIZES = (64, 256, 1024)
GPU_SIZES = (256, 1024, 4096)
#: short rounds: a size table is three small measurements, not the doctor's main one
SIZE_PLAN = Plan(min_rounds=3, max_rounds=5, budget_s=0.6, op_box_s=0.02, max_reps=6)


def measure_sizes(mode: str, work_at: Callable[[str, int], Work], sizes=CPU_SIZES, *, plan: Plan = SIZE_PLAN,
                  max_call_s: float = 0.05, threshold: float = 1.10) -> dict[str, dict]:
    """``{str(n): {"speedup": x, "ci": [lo, hi], "rounds": k}}`` for ``mode`` against fp32, or
    ``{"skipped": why}`` for a size left out. ``work_at(mode, n)``: a Work whose one kernel is an
    ``n``-square matmul in the mode's math."""
    out: dict[str, dict] = {}
    last: dict[str, float] = {}  # mode -> seconds of one call at the previous size
    prev_n = None
    for n in sizes:
        if prev_n is not None:
            predicted = max(last.values()) * (n / prev_n) ** 3
            if predicted > max_call_s:
                out[str(n)] = {"skipped": f"one {n}² matmul would take about {predicted:.2f} s "
                                          f"(from {prev_n}²); not measured"}
                continue
        works: dict[str, Work] = {}

        def work_for(m: str, n=n, works=works) -> Work:
            works[m] = w = work_at(m, n)
            return w

        try:
            series = run_rounds([mode], work_for, plan, threshold=threshold)
        except Exception as exc:  # noqa: BLE001 - reported in the table, never fatal
            out[str(n)] = {"skipped": f"{type(exc).__name__}: {str(exc)[:200]}"}
            break
        base, s = series.get("fp32"), series.get(mode)
        if base is None or s is None or not s.rounds or not base.rounds:
            out[str(n)] = {"skipped": (s.error if s is not None and s.error else "not measured")}
            break
        est = estimate(base, s, "kernels")
        if est is None or not math.isfinite(est.point):
            out[str(n)] = {"skipped": "not measured"}
            continue
        out[str(n)] = {"speedup": round(est.point, 4), "ci": est.ci, "rounds": est.n}
        for m, series_m in (("fp32", base), (mode, s)):
            op = next(iter(works[m].kernels)) if m in works else None
            times = series_m.times("kernels", op) if op else []
            if times:
                last[m] = min(times)
        prev_n = n
    return out


def size_words(mode: str, table: dict) -> str:
    """``"bf16: 57x at 4096², 1.1x at 256²"``: the measured sizes, largest first."""
    parts = [f"{v['speedup']:.2f}x at {n}²" if v["speedup"] < 10 else f"{v['speedup']:.0f}x at {n}²"
             for n, v in sorted(table.items(), key=lambda kv: -int(kv[0])) if "speedup" in v]
    return f"{mode}: {', '.join(parts)}" if parts else ""
