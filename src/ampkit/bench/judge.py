"""What a bench row may claim: one definition of speedup, its interval, and the checks that
withhold it.

**Speedup** (``speedup_vs_fp32``) is always the ratio of the rows' samples/s, and a row's samples/s
is its batch size over its *median* step time (the ``step_ms.p50`` the table shows). So the speedup
is fp32's median step time over the mode's (times the batch-size ratio, when ``--batch-size auto``
chose different batches), the number in the table equals the samples/s ratio in the same table,
and with ``--repeats N`` it is the ratio of the per-mode medians of the repeats' samples/s -- the
same statistic, one level up.

**Interval** (``speedup_ci``, 95%): a seeded bootstrap (:data:`ampkit.stats.RESAMPLES` resamples)
of that same ratio. One run: fp32's and the mode's timed steps are resampled independently
(step-to-step noise; what changed on the machine *between* the modes' runs is not in it, which is
what ``--repeats`` measures). With repeats: the repeats are resampled in pairs (the fp32 run and the
mode's run of the same repeat together, so load that hit both cancels). The interval is clamped to
hold the point. Words, read from the interval as the doctor reads its intervals
(:func:`ampkit.stats.classify`, threshold :data:`THRESHOLD`): "faster" only when its low end clears
1.10x, "slower" only when its high end is below 1/1.10, "no measurable difference" when it holds 1,
else "small difference".

**Withheld** (``speedup_vs_fp32`` null, ``flags`` and ``warning`` say why), the row keeping its
measured times:

- ``all_timed_steps_skipped``: the loss scaler skipped every timed step, so no optimizer update was
  timed (a skipped step does less work than a training step).
- ``diverged``: the final loss differs from fp32's by more than :data:`DIVERGENCE_REL` (25%) of
  ``max(|fp32 final loss|, |fp32's progress|, DIVERGENCE_FLOOR x |fp32 first loss|)``, progress being
  how far fp32's loss moved from its first step (a short run that drives both losses near zero --
  fp32 2.90 -> 0.28, bf16 2.87 -> 0.50 on torchvision ResNet-18, batch 4 -- made the same progress). Every mode starts from the same
  initial weights, trains on the same batch for the same number of steps, and reports the loss of its
  last step, so the two losses are directly comparable; the floor (a tenth of the loss fp32 started
  from) keeps a run that drove fp32's loss near zero from calling a tiny absolute gap a divergence.
  A non-finite loss is an ``error`` row already. Not checked when the batch sizes differ
  (``--batch-size auto``): the losses are then of different batches.
"""

from __future__ import annotations

import math
import shlex

from ..stats import CONFIDENCE, RESAMPLES, SEED, Estimate, classify
from ..words import THRESHOLD

#: a mode's final loss may differ from fp32's by this share of fp32's before it counts as diverged
DIVERGENCE_REL = 0.25
#: ... of the larger of fp32's final loss and this share of fp32's first loss
DIVERGENCE_FLOOR = 0.1

DIVERGED = "diverged"
ALL_SKIPPED = "all_timed_steps_skipped"
#: a one-run bootstrap resamples at most this many steps' worth of values in all (keeps 10^6 steps fast)
_MAX_DRAWS = 20_000_000


def median(xs) -> float:
    """The median of positive values on the log scale (an even count: the geometric mean of the middle
    two), so that the median of b/t is exactly b over the median of t (samples/s and step time agree)."""
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else math.sqrt(s[n // 2 - 1] * s[n // 2])


def _percentiles(values: list[float], point: float, n: int) -> Estimate:
    values = sorted(v for v in values if v > 0 and math.isfinite(v))
    if not values:
        return Estimate(point, None, None, n)
    alpha = (1 - CONFIDENCE) / 2
    low = values[int(math.floor(alpha * (len(values) - 1)))]
    high = values[int(math.ceil((1 - alpha) * (len(values) - 1)))]
    return Estimate(point, min(low, point), max(high, point), n)


def steps_speedup(base_ms: list[float], base_batch: int, mode_ms: list[float], mode_batch: int, *,
                  resamples: int = RESAMPLES, seed: int = SEED) -> Estimate:
    """One run: (mode_batch / median(mode steps)) / (base_batch / median(base steps)) and its
    bootstrap interval, each mode's timed steps resampled independently. No interval with fewer
    than two timed steps on either side."""
    import numpy as np

    b = np.asarray(base_ms, dtype=float)
    m = np.asarray(mode_ms, dtype=float)
    point = (mode_batch / float(np.median(m))) / (base_batch / float(np.median(b)))
    n = min(len(b), len(m))
    if n < 2:
        return Estimate(point, None, None, n)
    resamples = max(200, min(resamples, _MAX_DRAWS // (len(b) + len(m))))
    rng = np.random.default_rng(seed)
    mb = np.median(b[rng.integers(0, len(b), size=(resamples, len(b)))], axis=1)
    mm = np.median(m[rng.integers(0, len(m), size=(resamples, len(m)))], axis=1)
    return _percentiles(list((mode_batch / mm) / (base_batch / mb)), point, n)


def repeats_speedup(base_sps: list[float], mode_sps: list[float], *, resamples: int = RESAMPLES,
                    seed: int = SEED) -> Estimate:
    """``--repeats``: median(mode samples/s) / median(fp32 samples/s) over the repeats, and a bootstrap
    interval resampling repeats in pairs (``base_sps[i]`` and ``mode_sps[i]`` ran in the same repeat)."""
    import random

    if len(base_sps) != len(mode_sps) or not base_sps:
        raise ValueError("paired repeats need equal, non-empty lists")
    point = median(mode_sps) / median(base_sps)
    n = len(base_sps)
    if n < 2:
        return Estimate(point, None, None, n)
    rng = random.Random(seed)
    values = []
    for _ in range(resamples):
        idx = rng.choices(range(n), k=n)
        values.append(median([mode_sps[i] for i in idx]) / median([base_sps[i] for i in idx]))
    return _percentiles(values, point, n)


def words(est: Estimate) -> str:
    """faster / slower / no measurable difference / small difference (see the module docstring)."""
    return classify(est, THRESHOLD)


def divergence(mode_loss: float | None, base_loss: float | None, base_first: float | None) -> str | None:
    """The words of a divergence from fp32's final loss (see the module docstring), or None."""
    if mode_loss is None or base_loss is None or not (math.isfinite(mode_loss) and math.isfinite(base_loss)):
        return None
    scale = abs(base_loss)
    if base_first is not None and math.isfinite(base_first):
        scale = max(scale, abs(base_first - base_loss), DIVERGENCE_FLOOR * abs(base_first))
    gap = abs(mode_loss - base_loss)
    if gap <= DIVERGENCE_REL * scale:
        return None
    share = f"{gap / scale:.0%}" if scale > 0 else "an unbounded share"
    return (f"final loss {mode_loss:.4g} against fp32's {base_loss:.4g} (same weights, batch and steps): "
            f"differs by {share} of fp32's loss or progress, beyond the {DIVERGENCE_REL:.0%} bound")


#: how an error row whose loss went inf/NaN begins (:func:`ampkit.bench.rows.check_final_loss` writes it,
#: :func:`audit_lines` reads it: a row from a child has its non-finite loss as null)
NONFINITE_LOSS = "loss is "

#: the audit's flags a bench run's own flags carry over to (bench flag -> its value in the config)
_AUDIT_FLAGS = (("--workload", "workload"), ("--model", "model"), ("--data", "data"), ("--input-shape", "input_shape"),
                ("--num-classes", "num_classes"), ("--seq-len", "seq_len"), ("--image-size", "image_size"),
                ("--device", "device"))


def audit_lines(report) -> list[str]:
    """For each mode whose loss went inf/NaN (an error row) or whose loss scaler skipped every timed
    step, the ``ampkit audit`` command that finds where it first overflows, on the same model and
    data (bench's own flags carried over): bench tells *that* a mode failed, the audit *where*.
    Nothing for a plan's mode (the audit of the plain mode would name what the plan already keeps
    out); one line instead when fp32's loss went inf/NaN (not a precision problem)."""
    cfg, framework = report.config or {}, report.framework or "torch"

    def overflowed(r) -> bool:
        return (r.status == "error" and (r.error or "").startswith(NONFINITE_LOSS)) or ALL_SKIPPED in (r.flags or [])
    if any(r.mode == "fp32" and overflowed(r) for r in report.results):
        return ["  fp32's loss went inf/NaN: the run diverges in float32, which no precision mode mends"]
    failing = [r.mode for r in report.results if overflowed(r) and r.mode != "fp32" and not r.mode.startswith("plan:")
               and (r.mode != "fp8" or framework == "torch")]
    out = []
    for mode in failing:
        args = ["ampkit", "audit"] + (["--framework", framework] if framework != "torch" else [])
        for flag, key in _AUDIT_FLAGS:
            value = cfg.get(key)
            if value is not None and not (key == "device" and value == "auto") and not (key == "workload" and cfg.get("model")):
                args += [flag, ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)]
        out.append(f"  to find where {mode} first overflows: {' '.join(shlex.quote(a) for a in args + ['--mode', mode])}")
    return out
