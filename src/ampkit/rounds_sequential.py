"""When a mode's rounds may stop: its verdict is decided by the interval rule, at a confidence
corrected for looking more than once.

The doctor decides by the 95% interval of the per-round paired speedups (:mod:`ampkit.stats`,
:mod:`.verdicts`): *accelerated* when the low end clears the threshold T (1.10), *slower* when the
high end is below 1/T, *no measurable difference* when the interval lies within (1/T, T). Measuring
in rounds and stopping at the first round whose interval decides would, at 95% per look, decide
wrongly more often than one time in twenty. So every look reads the interval at the
**Bonferroni-corrected** confidence ``1 - 0.05 / K``, ``K`` = the looks the plan allows (the screen
look; the kernel look where training steps are costly to build, :meth:`ampkit.rounds._Rounds.kernel_look`,
counted whether it is taken or not; then one after every round from ``first_look`` to ``max_rounds``): K looks at alpha/K each give
a false decision in the whole sequence with probability at most alpha (the union bound), whatever
the number of looks actually taken.

The corrected interval is the same seeded bootstrap as the 95% one, at wider percentiles, so the 95%
interval of the same rounds lies inside it: a look that decides at the corrected confidence decides
the same under the 95% rule on the rounds measured, which is what the report then states
(:func:`corrected_agrees`). A mode still undecided when the rounds end (the cap, or the time budget
after ``min_rounds``) is reported by the 95% rule as before, and says that it stopped at the cap.

What "decided" means for a mode (:func:`mode_decision`), kernels and training step each read:
*slower* when either kind is slower (the verdict is then "slower", and it can never be recommended);
*no measurable difference* when the kernels lie within the band and the training step is not slower
(not accelerated: never recommended, and the verdict is "usable" either way); *accelerated* when
both kinds clear the threshold (the training step then confirms the gain under any reading of
:func:`ampkit.doctor.verdicts._training_faster`). Kernels faster but a training step within the
band stays undecided: the recommendation reads that step's median, and more rounds may move it.
An accelerated mode also waits for every other mode that may be recommended until the two training
steps are told apart or not (:func:`pair_settled`): the recommendation compares them
(:func:`ampkit.doctor.verdicts.recommend`).
"""

from __future__ import annotations

from collections.abc import Sequence

from .stats import CONFIDENCE, FASTER, SLOWER, Estimate, ratio_estimate

#: a mode's decision, as ``Series.stopped`` and the report's ``"stopped"`` say it
ACCELERATED, NO_DIFFERENCE = "accelerated", "no measurable difference"
#: rounds for the screen look (the cheapest kernel alone, before anything else is warmed up)
SCREEN_ROUNDS = 2
#: the screen decides "slower" only when the corrected interval's high end is also below this: many
#: times slower (an emulated mode: 0.01-0.05x), which two rounds of one op on a loaded machine cannot
#: fake (measured under load 13: a 2x faster TensorFlow bf16 matmul read 0.67-0.84x in two rounds)
SCREEN_DROP = 0.5


def planned_looks(first_look: int, max_rounds: int, screen: bool) -> int:
    """Looks the plan allows: one after each round from ``first_look`` to ``max_rounds``, and the screen's."""
    return max(1, max_rounds - min(first_look, max_rounds) + 1) + (1 if screen else 0)


def corrected_confidence(looks: int, confidence: float = CONFIDENCE) -> float:
    """Bonferroni: ``1 - (1 - confidence) / looks`` (0.95 over 8 looks: 0.99375 at each)."""
    return 1 - (1 - confidence) / max(1, looks)


def settle(est: Estimate | None, threshold: float) -> str | None:
    """FASTER (low end >= T), SLOWER (high end <= 1/T), NO_DIFFERENCE (within (1/T, T)), or None:
    the interval still reaches across a bound (or there is none: fewer than two rounds)."""
    if est is None or est.low is None:
        return None
    if est.low >= threshold:
        return FASTER
    if est.high <= 1 / threshold:
        return SLOWER
    if 1 / threshold < est.low and est.high < threshold:
        return NO_DIFFERENCE
    return None


def interval(ratios: Sequence[float], confidence: float) -> Estimate | None:
    return ratio_estimate(ratios, confidence=confidence) if len(ratios) >= 2 else None


def mode_decision(kernels: Sequence[float], training: Sequence[float], threshold: float,
                  confidence: float) -> str | None:
    """SLOWER, NO_DIFFERENCE, ACCELERATED or None (undecided) from a mode's per-round ratios of each
    kind (empty: the kind is not measured for this mode) at ``confidence``."""
    k = settle(interval(kernels, confidence), threshold) if kernels else None
    t = settle(interval(training, confidence), threshold) if training else None
    if SLOWER in (k, t):
        return SLOWER
    measured = [x for x in ((k, kernels), (t, training)) if x[1]]
    if not measured or any(cls is None for cls, _ in measured):
        return None
    if kernels and k == NO_DIFFERENCE:
        return NO_DIFFERENCE
    if all(cls == FASTER for cls, _ in measured):
        return ACCELERATED
    return None  # kernels faster, training step within the band: its median decides, and may still move


def pair_settled(ratios: Sequence[float], threshold: float, confidence: float) -> bool:
    """Whether two modes' paired training-step ratios are decided (one faster by the threshold, or
    both within it of each other); with no training step to compare there is nothing to wait for."""
    if not ratios:
        return True
    return settle(interval(ratios, confidence), threshold) is not None


def corrected_agrees(ratios: Sequence[float], threshold: float, confidence: float) -> bool:
    """The corrected look's decision, where it decides, is the 95% rule's on the same ratios."""
    wide = settle(interval(ratios, confidence), threshold)
    return wide is None or wide == settle(interval(ratios, CONFIDENCE), threshold)
