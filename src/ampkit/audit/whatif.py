"""``ampkit audit --what-if``: predict from float32 alone whether fp16, bf16 and fp8 will work, per module.

A backend runs the model in float32 only (a few steps on the audit's batch) and hands over one
:class:`ModuleSummary` per module: for its forward output and for the gradient w.r.t. it, a
:class:`TensorSummary`. Everything a format decides is predicted here, once for every framework.

What a summary keeps, and why:

- **amax** (over every element) and an **exponent histogram** of the magnitudes (``floor(log2|x|)``,
  one count per binary exponent, 277 bins for float32), over every element of a tensor up to
  :data:`HIST_SAMPLE` elements and over a systematic sample of that size beyond (the counts scaled
  up: a share estimated from 262k values is within 0.002 of the tensor's; counting every element of
  a ResNet-50's activations took 3x the step itself on a CPU). Every range limit of fp16, bf16
  and fp8 (smallest normal, what rounds to zero, what keeps fewer than 4 significant bits) is a
  power of two, and loss scales are powers of two, so the share of values beyond a limit at a
  loss scale ``2**k`` is an *exact* count from the histogram (up to HIST_SAMPLE elements; the
  histogram shifts by ``k``): the loss-scale sweep needs no second run. Overflow is read from amax
  (``65520`` rounds to inf in fp16) and the histogram's bins from 2**16 up.
- **rounding errors from real casts** (the backend rounds to float16/bfloat16 with its framework's
  dtypes, or ml_dtypes), on a strided **sample** of at most :data:`SAMPLE` elements: a rounding
  error is a mean over elements, which a 16k-element sample estimates to about 1% of itself,
  at a fraction of a full pass's cost.
- **fp8 quantization** of the tensors an fp8 recipe quantizes -- a matmul layer's input (e4m3) and
  the gradient w.r.t. its output (e5m2) -- under tensorwise, rowwise, per-channel and 32-element
  block scaling, with real float8 casts: scales from amaxes of the whole tensor, the cast on a
  strided sample of at most :data:`FP8_ROWS` rows.

Nothing of a tensor outlives its summary: the memory cost is a few hundred numbers per module.
"""

from __future__ import annotations

import math

from ..formats import BF16, FP16, UNDERFLOW_THRESHOLD, FloatFormat, lost_below
from ..summaries import EMIN, FP8_ROWS, HIST_SAMPLE, NBINS, NOISE_ONLY, SAMPLE, ModuleSummary, TensorSummary  # noqa: F401
from .whatif_units import NOISE_TO_SPREAD, _r, overflow_at  # noqa: F401 (NOISE_TO_SPREAD: this module's name too)

#: fp8 scalings predicted: tensorwise and rowwise are torchao's float8 recipes; per-channel and
#: 32-element blocks (the MX formats' block size) are finer scalings
SCALINGS = ("tensorwise", "rowwise", "channelwise", "block32")
#: an fp8-quantized tensor is fine when at most this share of its nonzero values is lost (flushed
#: or subnormal after scaling) and its signal-to-noise ratio is at least FP8_MIN_SNR_DB. A Gaussian
#: under tensorwise scaling gets 31.5 dB in e4m3 and 25.6 dB in e5m2 (measured): 10 dB below that fails
FP8_LOST = UNDERFLOW_THRESHOLD
FP8_MIN_SNR_DB = {"e4m3": 20.0, "e5m2": 15.0}
#: the aggregate share of nonzero gradients a loss scale may lose (flushed or < LOST_BITS bits)
RANGE_LOST = 0.01
#: loss scales tried: 2**-24 .. 2**40 (a dynamic scaler backs off below 1 when the gradients are large, as
#: GradScaler does: it has no floor; tiny gradients want scales far above its default)
SCALE_EXPONENTS = range(-24, 41)
FORMAT_NAMES = ("fp16", "bf16", "fp8")
VERDICTS = ("safe", "safe_with_scale", "keep_in_fp32", "unsafe")
FORMAT_OF = {"fp16": FP16, "bf16": BF16}




def fp8_ok(stats: dict | None, kind: str) -> bool:
    return stats is None or (stats["lost_frac"] <= FP8_LOST and stats["snr_db"] >= FP8_MIN_SNR_DB[kind])


def _grad_fp8_ok(m: ModuleSummary, stats: dict | None) -> bool:
    """A module's output gradient in e5m2, its rounding noise (float64 says so) left out of what is lost."""
    if stats is None or m.noise_only:
        return True
    noise = min(m.grad_noise or 0.0, 0.999)
    return fp8_ok({**stats, "lost_frac": max(0.0, stats["lost_frac"] - noise) / (1 - noise)}, "e5m2")


# ------------------------------------------------------------------ the predictions
def lost_share_at(mods: list[ModuleSummary], fmt: FloatFormat, scale: float) -> float:
    """The share of the nonzero gradients lost at ``scale``, rounding noise left out of both counts: the
    float64 pass says how many of a module's nonzero float32 gradients are noise (the smallest ones), and
    those are no gradient to lose. Per element, not per module: how much of a module is noise depends on the
    CPU's summation order (attention over one token: 47% of qkv's nonzero gradients on an AVX512 CPU, over
    half on an AMX one), and a module just under a "noise only" cut counted all its noise as lost."""
    counts = [_signal_lost(m, fmt, scale) for m in mods]
    total = sum(t for _, t in counts)
    return sum(lost for lost, _ in counts) / total if total > 0 else 0.0


def _keeps(leaves: list[ModuleSummary], held: list[ModuleSummary], fmt: FloatFormat, scale: float) -> bool:
    """``scale`` keeps the gradients: the leaves lose at most :data:`RANGE_LOST` of theirs, and no module the
    format holds loses more than the underflow threshold of its own (rounding noise left out of both)."""
    return lost_share_at(leaves, fmt, scale) <= RANGE_LOST and all(
        lost <= UNDERFLOW_THRESHOLD * total for lost, total in (_signal_lost(m, fmt, scale) for m in held))


def _signal_lost(m: ModuleSummary, fmt: FloatFormat, scale: float) -> tuple[float, float]:
    """(gradients lost at ``scale``, nonzero gradients) of one module, its rounding noise out of both."""
    noise = (m.grad_noise or 0.0) * m.grad.nonzero
    return max(0.0, m.grad.below(lost_below(fmt), scale) - noise), m.grad.nonzero - noise


def fp16_prediction(mods: list[ModuleSummary], scale: float, default_scale: float,
                    scale_limit: float | None = None) -> dict:
    """fp16: forward overflow/flush, gradient flush at ``scale``, the loss-scale range, the first overflow.
    ``scale_limit``: the largest scale the framework can hold when it computes the loss itself in fp16
    (tf_keras's losses on a float16 output: the scale, cast to float16, must stay below 65520)."""
    fmt, inf_at = FP16, overflow_at(FP16)
    leaves = [m for m in mods if m.leaf]
    rows, flagged = [], []
    first = first_phase = None
    for m in mods:
        f, g = m.fwd, m.grad
        inner_over = m.inner is not None and (m.inner.amax >= inf_at or not math.isfinite(m.inner.amax))
        over = m.fwd_low and (f.amax >= inf_at or not math.isfinite(f.amax)) or inner_over
        row = {"name": m.name, "type": m.type, "leaf": m.leaf, "fwd_amax": _r(f.amax),
               "inner_amax": _r(m.inner.amax) if m.inner is not None else None, "inner_op": m.inner_op,
               "autocast_float32": not m.fwd_low,
               "overflow_frac": _r(f.at_least(2.0**16) / f.nonzero if f.nonzero else 0.0),
               "flushed_frac": _r(f.share_below(2.0**-25)), "subnormal_frac": _r(f.share_below(fmt.smallest_normal)),
               "lost_frac": _r(f.share_below(lost_below(fmt))), "grad_amax": _r(g.amax),
               "grad_underflow_frac": _r(g.share_below(fmt.smallest_normal, scale)),
               "grad_lost_frac": _r(g.share_below(lost_below(fmt), scale)),
               "grad_flushed_frac": _r(g.share_below(2.0**-25, scale)),
               "grad_overflow": bool(g.amax * scale >= inf_at), "param_grad_amax": _r(m.param_grad_amax),
               "param_grad_overflow": bool(m.param_grad_amax * scale >= inf_at), "grad_noise": _r(m.grad_noise),
               "reasons": []}
        if over:
            row["reasons"].append("overflow")
            if first is None:
                first, first_phase = m.name, "forward"
        if m.leaf and m.fwd_low and row["lost_frac"] > UNDERFLOW_THRESHOLD:
            row["reasons"].append("underflow")
        rows.append(row)
    # the innermost overflowing modules are the ones to keep in float32 (a container holding one passes it on)
    over_names = [r["name"] for r in rows if r["reasons"]]
    for r in rows:
        inner = any(o != r["name"] and (o.startswith(r["name"] + ".") if r["name"] else True) for o in over_names)
        if r["reasons"] and not (inner and r["reasons"] == ["overflow"]):
            flagged.append(r["name"])
    lo = hi = None
    # the largest gradient a scaled backward holds: w.r.t. an output or of a parameter (a weight
    # gradient, a sum over the batch, can be far larger than any output's): a scale beyond it skips
    gmax = max([m.grad.amax for m in leaves] + [m.param_grad_amax for m in mods], default=0.0)
    # every module whose gradients the format holds (leaf or not: a container's own code makes its
    # output, so its gradient is a tensor of its own) must keep its share within the threshold the
    # rows below show: the range never contradicts the document's per-module shares
    held = [m for m in mods if m.fwd_low and m.grad.nonzero and not m.noise_only]
    for k in SCALE_EXPONENTS:
        s = 2.0**k
        if gmax * s >= inf_at or (scale_limit is not None and s > scale_limit):
            break
        hi = s
        if lo is None and _keeps(leaves, held, fmt, s):
            lo = s
    if first is None and gmax * 1.0 >= inf_at:  # gradients overflow even unscaled
        first_g = next((m for m in reversed(mods) if m.param_grad_amax >= inf_at or (m.leaf and m.grad.amax >= inf_at)),
                       None)
        first, first_phase = (first_g.name, "backward") if first_g else (None, None)
    rng = [lo, hi] if lo is not None and hi is not None else None
    by_scale = {f"{2.0**k:g}" if k < 0 else str(2**k): _r(lost_share_at(leaves, fmt, 2.0**k)) for k in SCALE_EXPONENTS}
    # "safe" only where the default scale itself keeps the gradients (judged there, as the rows are): a
    # range that leaves the default out, or a real share lost at it, needs a scale (issue #46)
    default_ok = _keeps(leaves, held, fmt, default_scale)
    if rng is None or len(flagged) > max(3, len(leaves) // 2):
        verdict = "unsafe"
    elif flagged:
        verdict = "keep_in_fp32"
    elif lo <= default_scale <= hi and default_ok:
        verdict = "safe"
    else:
        verdict = "safe_with_scale"
    return {"verdict": verdict, "first_overflow": first, "first_overflow_phase": first_phase,
            "loss_scale_range": rng, "loss_scale": scale, "default_loss_scale": default_scale,
            "keep_in_fp32": flagged, "grad_lost_by_scale": by_scale, "scaled_loss_limit": _r(scale_limit),
            "grad_lost_frac": _r(lost_share_at(leaves, fmt, scale)), "modules": rows}


def fp8_prediction(mods: list[ModuleSummary]) -> dict:
    """fp8: per matmul layer, its input in e4m3 and its output gradient in e5m2 under each scaling;
    the layers tensorwise scaling fails, and the finer scalings that fix each (predicted)."""
    rows, failing = [], []
    for m in mods:
        if not m.fp8_eligible:
            continue
        row = {"name": m.name, "type": m.type, "input_e4m3": {}, "grad_e5m2": {}, "fixed_by": [], "reasons": []}
        ok = {}
        for s in SCALINGS:
            a, g = m.fp8_input.fp8_stats(s), m.grad.fp8_stats(s)
            row["input_e4m3"][s] = {k: _r(v, 4) for k, v in a.items()} if a else None
            row["grad_e5m2"][s] = {k: _r(v, 4) for k, v in g.items()} if g else None
            ok[s] = fp8_ok(a, "e4m3") and _grad_fp8_ok(m, g)
        if not ok["tensorwise"]:
            a_bad = not fp8_ok(m.fp8_input.fp8_stats("tensorwise"), "e4m3")
            row["reasons"].append("input" if a_bad else "gradient")
            if a_bad and not _grad_fp8_ok(m, m.grad.fp8_stats("tensorwise")):
                row["reasons"].append("gradient")
            row["fixed_by"] = [s for s in SCALINGS[1:] if ok[s]]
            failing.append(row)
        rows.append(row)
    names = [r["name"] for r in failing]
    if not rows:  # nothing an fp8 recipe converts ran: no verdict about fp8 from nothing
        return {**not_measured("no matmul layer an fp8 recipe converts (Linear / Dense) ran: fp8 would change "
                               "nothing here, so there is nothing to judge"), "scaling": None, "eligible": 0}
    if not failing:
        verdict = "safe"
    elif all("rowwise" in r["fixed_by"] for r in failing):
        verdict = "safe_with_scale"  # torchao's rowwise recipe fixes every one
    elif len(failing) > max(3, len(rows) // 2):
        verdict = "unsafe"
    else:
        verdict = "keep_in_fp32"
    return {"verdict": verdict, "first_overflow": None, "loss_scale_range": None,
            "scaling": "rowwise" if verdict == "safe_with_scale" else ("tensorwise" if verdict == "safe" else None),
            "keep_in_fp32": [] if verdict == "safe_with_scale" else names,
            "eligible": len(rows), "modules": rows}


def not_measured(reason: str) -> dict:
    """The prediction of a format with no observation behind it: ``"verdict": "not_measured"`` and why."""
    return {"verdict": "not_measured", "reason": reason, "first_overflow": None, "loss_scale_range": None,
            "keep_in_fp32": [], "modules": []}


def predict(mods: list[ModuleSummary], formats, scale: float, default_scale: float,
            scale_limit: float | None = None) -> dict:
    """``{format: prediction}`` for the formats asked (fp16 at loss scale ``scale``)."""
    from .whatif_bf16 import bf16_prediction
    if not mods:  # stopped before a step finished: nothing observed, no verdict
        return {f: not_measured("no float32 step finished (the run was stopped first): nothing was observed")
                for f in formats}
    out = {}
    for f in formats:
        out[f] = (fp16_prediction(mods, scale, default_scale, scale_limit) if f == "fp16" else
                  bf16_prediction(mods) if f == "bf16" else fp8_prediction(mods))
    if "fp16" in out:  # fp16's advice offers bf16 only where bf16 is predicted safe (issue #46: one story)
        out["fp16"]["bf16_verdict"] = (out["bf16"] if "bf16" in out else bf16_prediction(mods))["verdict"]
    bad = float32_nonfinite(mods)
    bad = "(model)" if bad == "" else bad  # the root module is named, as the audit's documents name it
    op = next((m.inner_op for m in mods if (m.name or "(model)") == bad and m.inner is not None
               and not math.isfinite(m.inner.amax)), None)
    for p in out.values():  # float32 itself fails: no format, and no module kept in float32, can help
        p["float32_nonfinite"] = bad
        if op is not None:
            p["float32_nonfinite_op"] = op
        if bad is not None:  # no verdict about a format from a float32 run that fails by itself (issue #40)
            p.update(verdict="not_measured", keep_in_fp32=[], reason=(
                f"the float32 run itself is non-finite (first in {bad}{f', made by {op} in its own code' if op else ''}): "
                "this is not a precision "
                "problem, so no format is judged; look for an exp/log/sqrt/division out of range or an exploding "
                "input there"))
    return out


def float32_nonfinite(mods: list[ModuleSummary]) -> str | None:
    """The first module whose float32 output, own computation or gradient held an inf/NaN, or None."""
    def bad(t: TensorSummary | None) -> bool:
        return t is not None and not math.isfinite(t.amax)

    first = next((m.name for m in mods if bad(m.fwd) or bad(m.inner)), None)  # "" (the root) is a name too
    return first if first is not None else next((m.name for m in reversed(mods) if bad(m.grad)), None)
