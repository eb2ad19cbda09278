"""The statistics every verdict uses, once for doctor (both frameworks), bench and parity.

Speedups come from *paired* timings: in round ``r`` the fp32 time and the mode's time were taken
next to each other, so ``ratio_r = t_fp32_r / t_mode_r`` cancels whatever the machine was doing
in that round (another job on a shared CPU, clock drift). The point estimate is the median of
the ratios, taken on the log scale (so 2x and 0.5x are symmetric, and with an even count the
middle two are averaged geometrically); a median, not a mean, because on a shared machine a round
that another job disturbed is an outlier that should not move the verdict. The interval is a
**bootstrap percentile interval** of that median: the rounds are resampled with replacement
``resamples`` times with a seeded generator, so the same timings always give the same interval
(and a test can plant timings and get an exact answer). With 7 rounds it spans about the 2nd to
the 6th smallest ratio; with 3 it is the range. It is clamped to contain the point estimate.
With fewer than two rounds there is no spread to estimate: the interval is None.

A decision reads the interval, never the point: :func:`classify` says "faster" only when the low
end clears the threshold, "slower" only when the high end is below 1/threshold.

Parity's paired non-inferiority t-test (over seeds) lives here too.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 0

FASTER, SLOWER, SAME, SMALL = "faster", "slower", "no measurable difference", "small difference"


@dataclass(frozen=True)
class Estimate:
    """A speedup (ratio > 1: faster than the baseline) with its interval over ``n`` paired rounds."""

    point: float
    low: float | None
    high: float | None
    n: int

    @property
    def ci(self) -> list[float] | None:
        return None if self.low is None else [round(self.low, 4), round(self.high, 4)]

    def words(self) -> str:
        """``1.52x [1.40, 1.61]`` (or ``1.52x`` with one round)."""
        ci = f" [{self.low:.2f}, {self.high:.2f}]" if self.low is not None else ""
        return f"{self.point:.2f}x{ci}"


def paired_ratios(base: Sequence[float], other: Sequence[float]) -> list[float]:
    """``base[i] / other[i]``: with times, how many times faster ``other`` is than ``base``, per round."""
    if len(base) != len(other):
        raise ValueError(f"paired timings need equal lengths; received {len(base)} and {len(other)}")
    return [b / o for b, o in zip(base, other)]


def ratio_estimate(ratios: Sequence[float], *, confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
                   seed: int = SEED) -> Estimate:
    """Median (log scale) of per-round ratios and its seeded bootstrap percentile interval."""
    ratios = [float(r) for r in ratios]
    if not ratios or any(not (r > 0 and math.isfinite(r)) for r in ratios):
        raise ValueError(f"ratios must be positive and finite; received {ratios}")
    logs = [math.log(r) for r in ratios]
    n = len(logs)
    point = math.exp(statistics.median(logs))
    if n < 2:
        return Estimate(point, None, None, n)
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(logs, k=n)) for _ in range(resamples))
    alpha = (1 - confidence) / 2
    low = math.exp(medians[int(math.floor(alpha * (resamples - 1)))])
    high = math.exp(medians[int(math.ceil((1 - alpha) * (resamples - 1)))])
    return Estimate(point, min(low, point), max(high, point), n)


def speedup_estimate(base_times: Sequence[float], mode_times: Sequence[float], **kw) -> Estimate:
    """The speedup of a mode over the baseline from paired per-round times (seconds)."""
    return ratio_estimate(paired_ratios(base_times, mode_times), **kw)


def classify(est: Estimate, threshold: float) -> str:
    """FASTER when the interval's low end clears ``threshold``; SLOWER when its high end is below
    ``1/threshold``; SAME when it holds 1 (or there is no interval and the point is within the
    threshold); SMALL when it excludes 1 but stays within the threshold band."""
    low = est.point if est.low is None else est.low
    high = est.point if est.high is None else est.high
    if low >= threshold:
        return FASTER
    if high <= 1 / threshold:
        return SLOWER
    if low <= 1 <= high:
        return SAME
    return SMALL


def resample_rounds(n: int, rng: random.Random) -> list[int]:
    """Indices of one bootstrap resample of ``n`` rounds (for checking that a decision is stable)."""
    return rng.choices(range(n), k=n)


# ---------------------------------------------------------------- over seeds (parity)
def non_inferiority(mode_acc: list[float], base_acc: list[float], tolerance: float) -> tuple[float, float | None]:
    """(mean difference, one-sided p-value) that the mode is not worse than fp32 by >= tolerance.

    Paired by seed: a one-sided paired t-test (scipy.stats.ttest_1samp, alternative="greater") of
    H0 "worse by at least ``tolerance``". With one seed there is no variance to test: p is None.
    When every paired difference is the same, the t statistic is infinite and p is 0 or 1 by the sign.
    """
    diffs = [m - b for m, b in zip(mode_acc, base_acc)]
    delta = statistics.fmean(diffs)
    if len(diffs) < 2:
        return delta, None
    if max(diffs) - min(diffs) < 1e-12:
        return delta, 0.0 if delta > -tolerance else 1.0
    from scipy import stats

    res = stats.ttest_1samp(diffs, popmean=-tolerance, alternative="greater")
    return delta, float(res.pvalue)
