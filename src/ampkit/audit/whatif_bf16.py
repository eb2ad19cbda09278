"""The what-if's bf16 prediction (:mod:`.whatif`): per module, its rounding noise against its output's
spread, underflow, overflow, a softmax's error from its rounded inputs (``amplified``) and the error a bf16
run carries into each leaf (``carried``, measured by the backend), the last two judged with the audit's
own rules (:func:`~ampkit.audit.core.module_limit`)."""

from __future__ import annotations

import math

from ..formats import BF16, FORMATS
from .core import AMPLIFICATION, UNDERFLOW_THRESHOLD, lost_below, module_limit
from .model_error import grown_inside_finding
from .report import Finding, LayerStats
from .whatif_units import NOISE_TO_SPREAD, _r, overflow_at


def bf16_prediction(mods: list) -> dict:
    """bf16: rounding error per module output (relative, and against the output's own spread), underflow."""
    fmt, rows, flagged = BF16, [], []
    for m in mods:
        f, g = m.fwd, m.grad
        noise = f.noise("bf16") or (None, None)
        row = {"name": m.name, "type": m.type, "leaf": m.leaf, "rel_error": _r(noise[0], 8),
               "noise_to_spread": _r(noise[1], 6), "lost_frac": _r(f.share_below(lost_below(fmt))),
               "grad_lost_frac": _r(g.share_below(lost_below(fmt))), "reasons": []}
        if m.leaf and m.fwd_low and noise[1] is not None and noise[1] > NOISE_TO_SPREAD:
            row["reasons"].append("precision")
        amp = m.amplified.get("bf16")
        row["softmax_error"], row["softmax_op"] = _r(amp, 4), m.amplified_op if amp is not None else None
        if amp is not None and amp > module_limit(fmt) and "precision" not in row["reasons"]:
            row["reasons"].append("precision")  # its softmax turns bf16's rounding of its scores into this error
        if m.leaf and m.fwd_low and (row["lost_frac"] > UNDERFLOW_THRESHOLD or
                                     (row["grad_lost_frac"] > UNDERFLOW_THRESHOLD and not m.noise_only)):
            row["reasons"].append("underflow")
        inner = m.inner.amax if m.inner is not None else 0.0
        if (m.fwd_low and (not math.isfinite(f.amax) or f.amax >= overflow_at(fmt))
                or not math.isfinite(inner) or inner >= overflow_at(fmt)):
            row["reasons"].append("overflow")
        if row["reasons"]:
            flagged.append(m.name)
        rows.append(row)
    grown = carried_finding(mods, "bf16")
    if grown is not None and grown.layer not in flagged:  # an error a bf16 run carries and amplifies (measured)
        flagged.append(grown.layer)
        for row in rows:
            if row["name"] == grown.layer:
                row["reasons"].append("precision")
                row["carried_error"] = _r(grown.cause["error"], 4) if grown.cause else None
    leaves = sum(1 for m in mods if m.leaf)
    verdict = "safe" if not flagged else ("unsafe" if len(flagged) > max(3, leaves // 2) else "keep_in_fp32")
    return {"verdict": verdict, "first_overflow": next((r["name"] for r in rows if "overflow" in r["reasons"]), None),
            "loss_scale_range": None, "keep_in_fp32": flagged, "modules": rows}


def carried_finding(mods: list, fmt: str):
    """The module a run of ``fmt`` makes a large error in, from the errors it carries (``carried``), by the
    audit's own rules: a leaf that makes it itself, else the container between two leaves where it grows
    (:func:`~ampkit.audit.model_error.grown_inside_finding`); None when not measured or none."""
    layers = [LayerStats(m.name, m.type, leaf=True, rel_error=m.carried[fmt][0], input_rel_error=m.carried[fmt][1])
              for m in mods if m.leaf and fmt in m.carried]
    f = FORMATS[fmt]
    limit = module_limit(f)
    for lay in layers:
        if lay.rel_error > limit and lay.input_rel_error * AMPLIFICATION <= lay.rel_error:
            return Finding(lay.name, "precision", "", cause={"name": lay.name, "error": lay.rel_error})
    grown = grown_inside_finding(layers, f, fmt, limit, AMPLIFICATION, [], lambda name: "")
    if grown is not None:
        grown.cause = {"name": grown.layer, "error": max(lay.rel_error for lay in layers)}
    return grown
