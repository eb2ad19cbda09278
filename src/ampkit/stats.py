"""The statistics every verdict uses, once for doctor (both frameworks), bench and parity."""

from __future__ import annotations

import functools
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
        ci = f" [{ratio_text(self.low)}, {ratio_text(self.high)}]" if self.low is not None else ""
        return f"{ratio_text(self.point)}x{ci}"


def ratio_text(v: float) -> str:
    """A speedup as a number: two decimals, or two significant digits below 0.1 (an emulated mode
    can run hundreds of times slower than fp32: ``0.0039``, never ``0.00``)."""
    if v is None or not math.isfinite(v) or v == 0 or abs(v) >= 0.095:
        return f"{v:.2f}" if v is not None else "—"
    return f"{v:.{1 - math.floor(math.log10(abs(v)))}f}"


def ratio_estimate(ratios: Sequence[float], *, confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
                   seed: int = SEED) -> Estimate:
    """Median (log scale) of per-round ratios and its seeded bootstrap percentile interval."""
    logs = _logs(ratios)
    n = len(logs)
    point = math.exp(statistics.median(logs))
    if n < 2:
        return Estimate(point, None, None, n)
    medians = _bootstrap_medians(logs, resamples, seed)
    alpha = (1 - confidence) / 2
    low = math.exp(medians[int(math.floor(alpha * (resamples - 1)))])
    high = math.exp(medians[int(math.ceil((1 - alpha) * (resamples - 1)))])
    return Estimate(point, min(low, point), max(high, point), n)


def _logs(ratios: Sequence[float]) -> list[float]:
    """The ratios on the log scale; none, or one not positive and finite, is a ValueError."""
    ratios = [float(r) for r in ratios]
    if not ratios or any(not (r > 0 and math.isfinite(r)) for r in ratios):
        raise ValueError(f"ratios must be positive and finite; received {ratios}")
    return [math.log(r) for r in ratios]


@functools.lru_cache(maxsize=32)
def _draws(n: int, resamples: int, seed: int):
    """The bootstrap's resampled indices, ``resamples x n``: exactly what ``random.Random(seed)``'s
    ``choices(logs, k=n)`` picks, one resample after another (it draws ``floor(random() * n)``
    whatever the values), so they are drawn once per ``n`` and reused (the doctor reads an interval
    after every round, for every mode and kind)."""
    import numpy as np

    rng = random.Random(seed)
    idx = range(n)
    draws = np.array([rng.choices(idx, k=n) for _ in range(resamples)], dtype=np.intp)
    draws.setflags(write=False)
    return draws


def _bootstrap_medians(logs: list[float], resamples: int, seed: int) -> list[float]:
    """The sorted medians of the seeded resamples of ``logs``: the numbers ``statistics.median`` gives
    for each resample (the middle value, or the two middle ones' ``(a + b) / 2``), computed at once."""
    import numpy as np

    n = len(logs)
    values = np.sort(np.asarray(logs, dtype=np.float64)[_draws(n, resamples, seed)], axis=1)
    mid = values[:, n // 2] if n % 2 else (values[:, n // 2 - 1] + values[:, n // 2]) / 2
    return np.sort(mid).tolist()



def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """The distribution-free interval of a median: the order statistics ``x(k)`` and ``x(n+1-k)`` of
    the sorted values, ``k`` the largest with ``P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2``
    (each value falls below the true median with probability 1/2, whatever the distribution). It
    holds at least ``confidence`` for any n >= 6 at 95%; with fewer values no pair of order statistics
    does, and it is the whole range (coverage ``1 - 2**(1-n)``: 94% at n=5). None below 2 values.

    Unlike a bootstrap of the median, it does not shrink below what the values can show: with ten
    rounds a bootstrap percentile interval sits near x(3)..x(8) and misses the next run's median
    more often than it says (measured: bench on a shared CPU, #45)."""
    xs = sorted(float(v) for v in values)
    n = len(xs)
    if n < 2:
        return None
    alpha = (1 - confidence) / 2
    k, below = 1, 0.0
    for j in range(1, n // 2 + 1):  # below: P(B < j) = sum_{i<j} C(n, i) / 2^n
        below += math.comb(n, j - 1) / 2 ** n
        if below <= alpha:
            k = j
        else:
            break
    return xs[k - 1], xs[n - k]


def paired_estimate(ratios: Sequence[float], *, confidence: float = CONFIDENCE) -> Estimate:
    """Median of per-round paired ratios (log scale) and its distribution-free interval
    (:func:`median_interval`): bench's rounds, ten at most per run, are too few for a bootstrap."""
    ratios = [float(r) for r in ratios]
    point = math.exp(statistics.median(_logs(ratios)))
    ci = median_interval(ratios, confidence)
    if ci is None:
        return Estimate(point, None, None, len(ratios))
    return Estimate(point, min(ci[0], point), max(ci[1], point), len(ratios))


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
#: a paired test needs some spread: differences all within this of each other are "all the same"
_SAME = 1e-12


def _spread(diffs: Sequence[float]) -> bool:
    return len(diffs) > 1 and max(diffs) - min(diffs) > _SAME


def non_inferiority(mode_acc: list[float], base_acc: list[float], tolerance: float) -> tuple[float, float | None]:
    """(mean difference, one-sided p-value) that the mode is not worse than fp32 by >= tolerance.

    Paired by seed: a one-sided paired t-test (scipy.stats.ttest_1samp, alternative="greater") of
    H0 "worse by at least ``tolerance``". With one seed, or when every paired difference is the
    same (no variance: the t statistic is not defined), there is no test: p is None
    (:func:`paired_decision` says which case it is).
    """
    diffs = [m - b for m, b in zip(mode_acc, base_acc)]
    delta = statistics.fmean(diffs)
    if not _spread(diffs):
        return delta, None
    from scipy import stats

    return delta, float(stats.ttest_1samp(diffs, popmean=-tolerance, alternative="greater").pvalue)


@dataclass(frozen=True)
class Decision:
    """The parity verdict of one mode from its paired per-seed differences (mode - fp32, higher is better).

    ``verdict``: ``pass`` (significantly not worse than fp32 by ``tolerance`` or more: p < alpha),
    ``fail`` (significantly worse by more than ``tolerance``: the one-sided test the other way),
    ``inconclusive`` (neither: not proven). ``degenerate``: one seed, or every seed gave the same
    difference -- no variance, no t-test; the verdict then reads the difference itself and says so.
    """

    verdict: str
    delta: float
    p_value: float | None       # non-inferiority (H1: not worse by tolerance); None when degenerate
    p_worse: float | None       # H1: worse by more than tolerance
    degenerate: str | None      # None, "one seed" or "no variance"


def paired_decision(diffs: Sequence[float], tolerance: float, alpha: float = 0.05) -> Decision:
    diffs = [float(d) for d in diffs]
    delta = statistics.fmean(diffs)
    if len(diffs) < 2:  # one seed: no statistics, nothing proven either way
        return Decision("inconclusive", delta, None, None, "one seed")
    if not _spread(diffs):  # the same difference in every seed: judged on it, and said to be degenerate
        return Decision("pass" if delta > -tolerance else "fail", delta, None, None, "no variance")
    from scipy import stats

    p_ok = float(stats.ttest_1samp(diffs, popmean=-tolerance, alternative="greater").pvalue)
    p_worse = float(stats.ttest_1samp(diffs, popmean=-tolerance, alternative="less").pvalue)
    verdict = "pass" if p_ok < alpha else "fail" if p_worse < alpha else "inconclusive"
    return Decision(verdict, delta, p_ok, p_worse, None)


@dataclass(frozen=True)
class Equivalence:
    """A two one-sided tests (TOST) equivalence verdict on paired differences, margin ``+-margin``.

    ``ci``: the (1 - 2 alpha) confidence interval of the mean difference (90% at alpha 0.05); TOST
    at level alpha is equivalent to that interval lying inside (-margin, margin). ``verdict``:
    ``equivalent`` (inside), ``not_equivalent`` (wholly outside: the difference is beyond the margin
    with confidence), ``inconclusive`` (it straddles a bound). ``seeds_needed``: for an inconclusive
    result, the smallest number of seeds at which an interval of the observed standard deviation
    around the observed mean would decide (None when it never would within ``max_seeds``, e.g. a
    mean on the bound, or when there is no variance estimate). ``p_value``: TOST's, the larger of
    the two one-sided p-values. ``degenerate``: as :class:`Decision`'s.
    """

    verdict: str
    ci: tuple[float, float] | None
    seeds_needed: int | None
    p_value: float | None
    degenerate: str | None
    n: int

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "ci": None if self.ci is None else [float(self.ci[0]), float(self.ci[1])],
                "seeds_needed": self.seeds_needed, "p_value": self.p_value, "degenerate": self.degenerate}


EQUIVALENT, NOT_EQUIVALENT, INCONCLUSIVE = "equivalent", "not_equivalent", "inconclusive"


def _classify_interval(lo: float, hi: float, margin: float) -> str:
    if -margin < lo and hi < margin:
        return EQUIVALENT
    if hi < -margin or lo > margin:
        return NOT_EQUIVALENT
    return INCONCLUSIVE


def seeds_to_decide(mean: float, sd: float, margin: float, alpha: float = 0.05, max_seeds: int = 1000) -> int | None:
    """The smallest n >= 2 whose (1 - 2 alpha) interval ``mean +- t(1 - alpha, n - 1) sd / sqrt(n)``
    lies wholly on one side of the nearer margin bound (inside: equivalent; outside: not); None when
    no n up to ``max_seeds`` does (the mean on a bound, no variance)."""
    gap = abs(margin - abs(mean))
    if not (sd > 0 and gap > 0 and math.isfinite(sd) and math.isfinite(gap)):
        return None
    from scipy import stats

    def decides(n: int) -> bool:
        return float(stats.t.ppf(1 - alpha, n - 1)) * sd / math.sqrt(n) < gap

    if not decides(max_seeds):
        return None
    lo, hi = 2, max_seeds  # decides() is monotone in n: bisect for the first n that decides
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if decides(mid) else (mid + 1, hi)
    return lo


def tost(diffs: Sequence[float], margin: float, alpha: float = 0.05, max_seeds: int = 1000) -> Equivalence:
    """TOST on paired differences (scipy.stats.ttest_1samp against -margin, alternative="greater",
    and against +margin, alternative="less"); see :class:`Equivalence`."""
    diffs = [float(d) for d in diffs]
    n = len(diffs)
    if n < 2:
        return Equivalence(INCONCLUSIVE, None, None, None, "one seed", n)
    mean = statistics.fmean(diffs)
    if not _spread(diffs):
        verdict = EQUIVALENT if abs(mean) < margin else NOT_EQUIVALENT
        return Equivalence(verdict, (mean, mean), None, None, "no variance", n)
    from scipy import stats

    sd = statistics.stdev(diffs)
    half = float(stats.t.ppf(1 - alpha, n - 1)) * sd / math.sqrt(n)
    lo, hi = mean - half, mean + half
    p_low = float(stats.ttest_1samp(diffs, popmean=-margin, alternative="greater").pvalue)
    p_high = float(stats.ttest_1samp(diffs, popmean=margin, alternative="less").pvalue)
    verdict = _classify_interval(lo, hi, margin)
    needed = seeds_to_decide(mean, sd, margin, alpha, max_seeds) if verdict == INCONCLUSIVE else None
    return Equivalence(verdict, (lo, hi), needed, max(p_low, p_high), None, n)
