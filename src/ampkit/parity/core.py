"""Parity, framework-neutral: train the same model in fp32 and in mixed precision over seeds; judge statistically.

Per seed, every mode starts from the same initial weights and sees the same data order, so the
accuracies are paired by seed. The verdict is a one-sided non-inferiority test (MLPerf judges
convergence statistically, over runs): H0 "the mode is worse than fp32 by at least
``tolerance``" against H1 "it is not", a paired t-test on the per-seed metric differences
(scipy.stats.ttest_1samp, alternative="greater"). The mode passes when p < ``alpha``, fails when
the test the other way shows it worse by more than ``tolerance``, and is ``inconclusive`` when
neither is shown (too few seeds for the noise). Beside it, an equivalence verdict: two one-sided
tests (TOST) with the margin +-``margin`` (:func:`ampkit.stats.tost`), which also says how many
seeds the observed spread would need to decide. One seed, or the same difference in every seed,
is degenerate (no variance, no t-test) and is reported as such, never as "p=0".

The backends train (one seed in one mode); the data order, the statistics and the verdicts are
here, the flow around them in :mod:`ampkit.parity.driver`, once for every framework.
"""

from __future__ import annotations

import math
import statistics

from ..stats import Decision, Equivalence, paired_decision, tost
from ..words import signed
from .chance import did_not_learn
from .report import ALPHA, ParityResult, RunRecord


# ---------------------------------------------------------------- statistics
def verdict_words(dec: Decision, tolerance: float, n: int, metric: str = "accuracy", alpha: float = ALPHA,
                  raw: float | None = None) -> str:
    """Why the verdict is what it is, in one sentence (the table's and the report's reason).
    ``raw``: the mean difference mode - fp32 in the metric's own direction (``dec.delta`` reads
    higher as better)."""
    delta = dec.delta if raw is None else raw
    mean = f"mean {metric} {signed(delta)} vs fp32"
    if dec.degenerate == "one seed":
        return f"one seed, no statistics ({mean}): nothing is proven either way; use --seeds 3 or more"
    if dec.degenerate == "no variance":
        where = "within" if dec.verdict == "pass" else "beyond"
        return (f"degenerate: all {n} seeds gave the same difference ({signed(delta)}), so there is no variance "
                f"and no t-test; judged on that difference, {where} the tolerance {tolerance:g}")
    if dec.verdict == "pass":
        return (f"not worse than fp32 by {tolerance:g} or more (one-sided paired t-test p={dec.p_value:.3g} "
                f"< {alpha:g}); {mean}")
    if dec.verdict == "fail":
        return (f"worse than fp32 by more than {tolerance:g} (one-sided paired t-test p={dec.p_worse:.3g} "
                f"< {alpha:g}); {mean}")
    return (f"not proven: cannot rule out being worse than fp32 by {tolerance:g} (p={dec.p_value:.3g} >= "
            f"{alpha:g}), nor show that it is (p={dec.p_worse:.3g}); {mean} over {n} seeds")


def equivalence_words(eq: Equivalence, margin: float) -> str:
    conf = f"{100 * (1 - 2 * ALPHA):g}%"
    if eq.degenerate == "one seed":
        return "one seed: no interval; use --seeds 3 or more"
    lo, hi = eq.ci
    if eq.degenerate == "no variance":
        where = "inside" if eq.verdict == "equivalent" else "outside"
        return f"degenerate: the same difference ({signed(lo)}) in every seed, no variance; {where} the margin ±{margin:g}"
    ci = f"the {conf} interval [{signed(lo)}, {signed(hi)}]"
    if eq.verdict == "equivalent":
        return f"equivalent within ±{margin:g}: {ci} lies inside (TOST p={eq.p_value:.3g})"
    if eq.verdict == "not_equivalent":
        return f"not equivalent: {ci} lies beyond the margin ±{margin:g}"
    more = (f"about {eq.seeds_needed} seeds would decide at the observed spread" if eq.seeds_needed
            else "no number of seeds up to 1,000 would decide at the observed spread (the mean is on the margin)")
    return f"inconclusive: {ci} crosses the margin ±{margin:g}; {more}"


def _mean_std(xs: list[float]) -> dict:
    """Mean and standard deviation; NaN for both when a run ended non-finite (``statistics.stdev``
    raises on NaN; the mode then fails parity for that reason, see :func:`summarize`)."""
    if not xs or not all(math.isfinite(x) for x in xs):
        return {"mean": math.nan, "std": math.nan}
    return {"mean": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else 0.0}


def _measure_despite_loss(res: ParityResult, paired: list, metric: str, margin: float, alpha: float) -> None:
    """A mode that fails because its training loss went non-finite while its metric stayed finite
    in every seed (an fp16 run whose overflowing steps were skipped): the difference from fp32 and
    the equivalence interval are still measured, and the reason says separately that the loss went
    non-finite. The verdicts stay ``fail``/``not_equivalent``: a run whose loss diverged is not
    shown equivalent by its metric alone."""
    res.loss_nonfinite_seeds = [r.seed for r, _ in paired
                                if not r.train_loss or not all(math.isfinite(x) for x in r.train_loss)]
    if not paired or any(r.error for r, _ in paired) or \
            not all(math.isfinite(_final(r.test_accuracy)) for r, _ in paired):
        return
    raw = [_final(r.test_accuracy) - _final(b.test_accuracy) for r, b in paired]
    res.delta_vs_fp32 = statistics.fmean(raw)
    eq = tost(raw, margin, alpha)
    interval = (f"the {100 * (1 - 2 * alpha):g}% interval of the difference is [{signed(eq.ci[0])}, "
                f"{signed(eq.ci[1])}]" if eq.ci else "one seed: no interval")
    loss = (f"the training loss went non-finite in seeds {res.loss_nonfinite_seeds}; " if res.loss_nonfinite_seeds
            else "")
    res.reason += f"; {loss}the {metric} stayed finite: mean {signed(res.delta_vs_fp32)} vs fp32"
    res.equivalence.update(ci=[float(x) for x in eq.ci] if eq.ci else None, degenerate=eq.degenerate,
                           reason=f"{res.equivalence['reason']}; its {metric} stayed finite ({interval})")


# ---------------------------------------------------------------- the data order
def _final(xs: list[float]) -> float:
    return float(xs[-1]) if xs else math.nan


def _broken(r: RunRecord) -> bool:
    """The run raised, or its training loss or final metric is not finite."""
    return bool(r.error) or not r.train_loss or not all(math.isfinite(x) for x in r.train_loss) \
        or not math.isfinite(_final(r.test_accuracy))


def _broken_words(runs: list[RunRecord]) -> tuple[int, str]:
    bad = [r for r in runs if _broken(r)]
    errors = [r for r in bad if r.error]
    if errors:
        return len(bad), (f"training raised in {len(errors)} of {len(runs)} seeds (seed {errors[0].seed}: "
                          f"{errors[0].error})")
    return len(bad), (f"training loss or metric became non-finite (inf/NaN) in {len(bad)} of {len(runs)} seeds "
                      f"(seeds {[r.seed for r in bad]})")


def _inconclusive(res: ParityResult, why: str, margin: float) -> None:
    res.verdict, res.reason = "inconclusive", why
    res.equivalence = {"verdict": "inconclusive", "ci": None, "seeds_needed": None, "p_value": None,
                       "degenerate": None, "margin": margin, "reason": why}


def baseline_problem(records: list[RunRecord], chance=None, higher_is_better: bool = True) -> str | None:
    """Why fp32 did not learn (:func:`ampkit.parity.chance.did_not_learn`) when its runs all finished
    finite, else None (a broken fp32 has its own reason)."""
    base = [r for r in records if r.mode == "fp32"]
    if not base or any(_broken(r) for r in base):
        return None
    return did_not_learn(base, chance, higher_is_better)


def summarize(records: list[RunRecord], modes: list[str], tolerance: float, alpha: float = ALPHA, *,
              margin: float | None = None, metric: str = "accuracy", higher_is_better: bool = True,
              chance=None) -> list[ParityResult]:
    """Per mode: the seeds, mean and std of the final loss and metric, and (against fp32, paired by
    seed) the non-inferiority verdict and the TOST equivalence. A mode whose training raised or went
    non-finite in any seed fails, with the count of those seeds. ``higher_is_better`` False (a loss
    as the metric): the tests read fp32 - mode, so "worse" still means worse. An fp32 baseline that
    did not learn (at ``chance``, a :class:`~ampkit.parity.chance.Chance`, or its loss did not fall)
    makes every mode that finished ``inconclusive``, saying so (issue #46); a mode that raised or
    went non-finite still fails (that needs no baseline), its reason saying the baseline too."""
    margin = tolerance if margin is None else margin
    sign = 1.0 if higher_is_better else -1.0
    by_mode = {m: sorted((r for r in records if r.mode == m), key=lambda r: r.seed) for m in modes}
    base = {r.seed: r for r in by_mode.get("fp32") or []}
    base_bad = [r for r in base.values() if _broken(r)]
    unlearned = baseline_problem(list(base.values()), chance, higher_is_better)
    results = []
    for mode in modes:
        runs = by_mode[mode]
        if not runs:
            continue
        res = ParityResult(mode, [r.seed for r in runs], _mean_std([_final(r.train_loss) for r in runs]),
                           {"name": metric, "higher_is_better": higher_is_better,
                            **_mean_std([_final(r.test_accuracy) for r in runs])},
                           None, None, "baseline", skipped_steps=sum(r.skipped_steps for r in runs), runs=runs)
        res.nonfinite_seeds, broken = _broken_words(runs)
        paired = [(r, base[r.seed]) for r in runs if r.seed in base]
        if mode == "fp32":
            res.reason = "the reference" + (f"; but its {broken}" if res.nonfinite_seeds else "") + (
                f"; but {unlearned}" if unlearned else "")
        elif not base:
            res.verdict, res.reason = "fail", ("no fp32 run to compare against (include fp32 in --modes; "
                                                "a grid that was interrupted: --resume it)")
        elif unmeasured := next((r.not_measured for r in runs if getattr(r, "not_measured", None)), None):
            res.verdict, res.reason = "not_measured", unmeasured  # nothing ran in the mode: no verdict about it
            res.equivalence = {"verdict": "not_measured", "ci": None, "seeds_needed": None, "p_value": None,
                               "degenerate": None, "margin": margin, "reason": unmeasured}
        elif base_bad:  # the same input fails in fp32: the mixed mode is not to blame (issue #40)
            why = (f"fp32 failed too on the same data (its {_broken_words(list(base.values()))[1]}): not a precision "
                   "problem, and nothing to compare against")
            _inconclusive(res, why, margin)
        elif res.nonfinite_seeds:
            res.verdict, res.reason = "fail", broken
            res.equivalence = {"verdict": "not_equivalent", "ci": None, "seeds_needed": None, "p_value": None,
                               "degenerate": None, "margin": margin, "reason": f"not equivalent: {broken}"}
            _measure_despite_loss(res, paired, metric, margin, alpha)
            if unlearned:  # a run that raised or went non-finite fails on its own; the baseline is still said
                res.reason += f"; besides, {unlearned}"
        elif unlearned:  # nothing learned to agree with: no verdict either way (issue #46)
            _inconclusive(res, unlearned, margin)
        elif not paired:  # an interrupted grid: this mode's seeds and fp32's do not meet
            why = f"no seed has both an fp32 run and a {mode} run to pair (the grid is incomplete: --resume it)"
            _inconclusive(res, why, margin)
        else:
            raw = [_final(r.test_accuracy) - _final(b.test_accuracy) for r, b in paired]
            dec = paired_decision([sign * d for d in raw], tolerance, alpha)
            eq = tost(raw, margin, alpha)
            res.delta_vs_fp32, res.p_value = statistics.fmean(raw), dec.p_value
            res.verdict, res.reason = dec.verdict, verdict_words(dec, tolerance, len(raw), metric, alpha,
                                                            raw=res.delta_vs_fp32)
            res.equivalence = {**eq.to_dict(), "margin": margin, "reason": equivalence_words(eq, margin)}
        results.append(res)
    return results
