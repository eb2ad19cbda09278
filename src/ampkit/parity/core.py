"""Parity, framework-neutral: train the same model in fp32 and in mixed precision over seeds; judge statistically.

Per seed, every mode starts from the same initial weights and sees the same data order, so the
accuracies are paired by seed. The verdict is a one-sided non-inferiority test (MLPerf judges
convergence statistically, over runs): H0 "the mode is worse than fp32 by at least
``tolerance``" against H1 "it is not", a paired t-test on the per-seed accuracy differences
(scipy.stats.ttest_1samp, alternative="greater"). The mode passes when p < ``alpha``.

The backends train (one seed in one mode); the data order, the statistics and the verdicts are
here, the flow around them in :mod:`ampkit.parity.driver`, once for every framework.
"""

from __future__ import annotations

import math
import statistics

import numpy as np

from ..stats import non_inferiority
from .report import ALPHA, ParityResult, RunRecord


# ---------------------------------------------------------------- statistics
def verdict_for(delta: float, p_value: float | None, tolerance: float, alpha: float = ALPHA) -> tuple[str, str]:
    if p_value is None:
        ok = delta > -tolerance
        return ("pass" if ok else "fail"), (
            f"one seed, no statistics: accuracy {delta:+.4f} vs fp32 is {'within' if ok else 'beyond'} "
            f"the tolerance {tolerance:g}; use --seeds 3 or more for a test")
    if p_value < alpha:
        return "pass", (f"not worse than fp32 by {tolerance:g} or more (one-sided paired t-test p={p_value:.3g} "
                        f"< {alpha:g}); mean accuracy {delta:+.4f} vs fp32")
    return "fail", (f"cannot rule out being worse than fp32 by {tolerance:g} (p={p_value:.3g} >= {alpha:g}); "
                    f"mean accuracy {delta:+.4f} vs fp32")


def _mean_std(xs: list[float]) -> dict:
    """Mean and standard deviation; NaN for both when a run ended non-finite (``statistics.stdev``
    raises on NaN; the mode then fails parity for that reason, see :func:`summarize`)."""
    if not all(math.isfinite(x) for x in xs):
        return {"mean": math.nan, "std": math.nan}
    return {"mean": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else 0.0}


# ---------------------------------------------------------------- the data order
def loader_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The order of the training samples in one epoch of one seed: the same in every mode and
    in both frameworks, so the runs of a seed are paired."""
    return np.random.default_rng(seed * 1000 + epoch).permutation(n)


def summarize(records: list[RunRecord], modes: list[str], tolerance: float, alpha: float = ALPHA) -> list[ParityResult]:
    by_mode = {m: sorted((r for r in records if r.mode == m), key=lambda r: r.seed) for m in modes}
    base = by_mode.get("fp32")
    base_acc = [r.test_accuracy[-1] for r in base] if base else None
    results = []
    for mode in modes:
        runs = by_mode[mode]
        if not runs:
            continue
        accs = [r.test_accuracy[-1] for r in runs]
        losses = [r.train_loss[-1] for r in runs]
        res = ParityResult(mode, [r.seed for r in runs], _mean_std(losses), {"name": "accuracy", **_mean_std(accs)},
                           None, None, "baseline", skipped_steps=sum(r.skipped_steps for r in runs), runs=runs)
        if mode == "fp32":
            res.reason = "the reference"
        elif base_acc is None:
            res.verdict, res.reason = "fail", "no fp32 run to compare against (include fp32 in --modes)"
        else:
            n = min(len(accs), len(base_acc))
            delta, p = non_inferiority(accs[:n], base_acc[:n], tolerance)
            res.delta_vs_fp32, res.p_value = delta, p
            res.verdict, res.reason = verdict_for(delta, p, tolerance, alpha)
            if any(not math.isfinite(x) for r in runs for x in r.train_loss):
                res.verdict, res.reason = "fail", "training loss became non-finite"
        results.append(res)
    return results
