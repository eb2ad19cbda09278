"""Did the fp32 baseline learn? Parity compares each mode with fp32; when fp32 itself learned
nothing, "bf16 equivalent to fp32" says nothing about bf16 (issue #46: a model stuck at 0.499 on two
classes got "pass; equivalent [+0, +0]").

The reference is the best constant predictor on the validation data (:class:`Chance`), computed by a
backend from the targets when it prepares the data (:func:`of_targets`):

* class targets judged by accuracy: the majority class's share ``p`` of the ``n`` validation
  samples; fp32 is *at chance* when its mean accuracy is within the spread of that predictor,
  ``p + 2 * sqrt(p * (1 - p) / n)`` (two binomial standard errors).
* other targets judged by the default mean squared error: predicting each output's mean gives the
  targets' variance; fp32 is *at chance* when its validation loss is no lower than that.

A custom metric or loss has no such reference (None): only the second test applies. That test
(:func:`did_not_learn`): fp32's training loss did not fall -- its last epoch's mean is no lower than
the loss of the first training step.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

__all__ = ["Chance", "did_not_learn", "of_targets"]


@dataclass(frozen=True)
class Chance:
    """The best constant predictor's metric on the validation data: ``value``; at chance is at or
    below ``value + spread`` (accuracy) or at or above ``value`` (a loss); ``words`` says what it is."""

    metric: str
    value: float
    spread: float
    words: str

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d) -> Chance | None:
        try:
            return cls(str(d["metric"]), float(d["value"]), float(d["spread"]), str(d["words"]))
        except (TypeError, KeyError, ValueError):
            return None

    def at_chance(self, value: float) -> bool:
        if self.metric == "accuracy":
            return value <= self.value + self.spread
        return value >= self.value


def of_targets(targets, metric: str, classes: bool, default_loss: bool = True) -> Chance | None:
    """The constant predictor of validation ``targets`` (a NumPy-convertible array of all of them)
    for ``metric``: ``accuracy`` on class indices, or ``loss`` under the default mean squared error
    (``default_loss``); None for anything else (a custom metric or loss has no known constant)."""
    import numpy as np

    y = np.asarray(targets)
    n = len(y) if y.ndim else 0
    if n == 0:
        return None
    if metric == "accuracy" and classes:
        values, counts = np.unique(y.reshape(-1), return_counts=True)
        total = int(counts.sum())  # predictions scored: one per sample, or per position (tokens)
        p = float(counts.max()) / total
        spread = 2.0 * math.sqrt(p * (1.0 - p) / total)
        return Chance("accuracy", p, spread, f"always predicting the majority class ({len(values)} classes in the "
                      f"{n} validation samples) scores {p:.3f}, +-{spread:.3f}")
    if metric == "loss" and not classes and default_loss:
        flat = y.reshape(n, -1).astype(np.float64)
        var = float(np.mean((flat - flat.mean(axis=0)) ** 2))
        return Chance("loss", var, 0.0, f"predicting the mean of the {n} validation targets scores a mean squared "
                      f"error of {var:.4g}")
    return None


def did_not_learn(fp32_runs: list, chance: Chance | None, higher_is_better: bool) -> str | None:
    """Why fp32 did not learn (a reason for every mode's verdict), or None when it did or nothing tells.
    ``fp32_runs``: its finished runs (RunRecords with a finite final metric and training loss)."""
    runs = [r for r in fp32_runs if r.test_accuracy and r.train_loss]
    if not runs:
        return None
    finals = [float(r.test_accuracy[-1]) for r in runs]
    mean = statistics.fmean(finals)
    if chance is not None and chance.metric == ("accuracy" if higher_is_better else "loss") and chance.at_chance(mean):
        return (f"the fp32 baseline did not learn: its {chance.metric} ({mean:.4g}, mean of {len(runs)} seeds) is at "
                f"chance ({chance.words}), so agreeing with it says nothing about a mode; make the task learnable "
                "(targets that depend on the inputs, more epochs or steps, another lr) and run again")
    firsts = [r.first_loss for r in runs if getattr(r, "first_loss", None) is not None]
    if len(firsts) == len(runs):
        first, last = statistics.fmean(firsts), statistics.fmean(float(r.train_loss[-1]) for r in runs)
        if math.isfinite(first) and last >= first:
            return (f"the fp32 baseline did not learn: its training loss did not fall (first step {first:.4g}, last "
                    f"epoch {last:.4g}, mean of {len(runs)} seeds), so agreeing with it says nothing about a mode; "
                    "check the lr, the loss and the data, and run again")
    return None
