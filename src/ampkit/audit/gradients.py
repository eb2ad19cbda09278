"""Parameter gradients in the audit's findings, framework-neutral: the gradients a real step checks.

A loss scaler (``torch.amp.GradScaler``, Keras' ``LossScaleOptimizer``) skips a step when any
*parameter* gradient is inf/NaN. A weight gradient is a sum over the batch, so it can overflow fp16
at a loss scale where every activation and every gradient w.r.t. a module's output is finite. The
backend fills each layer's ``param_grad_amax`` (the float32 reference's gradients of its own
parameters), ``param_grad_nonfinite`` (the audited pass at the audited scale) and
``param_grad_overflow`` (the parameters whose gradient was inf/NaN at some measured scale); this
module turns them into headroom, findings and the loss scale that fits, so that the skip count, the
scale the audit trains at and the suggested scale all come from the same measurements.
"""

from __future__ import annotations

import math

from ..formats import FloatFormat
from .report import SEVERITY, Finding, LayerStats

#: a suggested scale keeps the largest gradient this many times below the format's max (2 bits)
MARGIN = 4.0


def set_param_headroom(layers: list[LayerStats], fmt: FloatFormat, scale: float) -> None:
    for lay in layers:
        if lay.param_grad_amax is not None:
            lay.param_grad_headroom_log2 = (fmt.headroom_log2(lay.param_grad_amax * scale) if lay.param_grad_amax
                                            else math.inf)


def largest_amax(layers: list[LayerStats], fmt: FloatFormat) -> float:
    """The largest gradient a scaled backward holds in ``fmt``: w.r.t. an in-format module's output,
    or of a parameter of one (its weight gradient is computed in the format before the cast)."""
    vals = [lay.grad_amax for lay in layers if lay.in_format(fmt)]
    vals += [lay.param_grad_amax for lay in layers if lay.param_grad_amax and lay.in_format(fmt)]
    return max((v for v in vals if v and math.isfinite(v)), default=0.0)


def fitting_scale(layers: list[LayerStats], fmt: FloatFormat) -> float | None:
    """The largest power of two that keeps every such gradient :data:`MARGIN` below the max, or None."""
    top = largest_amax(layers, fmt)
    if not top:
        return None
    return float(2.0 ** math.floor(math.log2(fmt.max_finite / MARGIN / top)))


def param_findings(layers: list[LayerStats], fmt: FloatFormat, mode: str, scale: float, scaler: str,
                   init_arg: str, scale_code) -> list[Finding]:
    """An ``overflow`` finding per module whose parameter gradient is inf/NaN at the audited scale:
    the step a real scaler skips there, the parameters named, the scale that avoids it."""
    out = []
    if mode != "fp16":
        return out
    fit = fitting_scale(layers, fmt)  # one scale for every gradient: what the report suggests too
    for lay in layers:
        if not lay.param_grad_nonfinite:
            continue
        params = (lay.param_grad_overflow or {}).get("params") or [lay.name or "(model)"]
        amax = lay.param_grad_amax or 0.0
        reach = (f" reaches {amax:.3g} in float32; times loss scale {scale:g} that is {amax * scale:.3g}, beyond "
                 f"{fmt.name}'s max {fmt.max_finite:g}" if amax else f" is inf/NaN at loss scale {scale:g}")
        advice = (f"the gradient of {_names(params)} ({lay.type} {lay.name or '(model)'}'s parameter){reach}: "
                  f"the weight gradient is a sum over the batch, computed in {fmt.name} before the float32 .grad, "
                  f"so {scaler} finds it non-finite and skips the step while halving the scale"
                  + (f"; {init_arg}={fit:g} or lower avoids it" + (" (below 1: a dynamic scaler backs off there too)"
                                                                   if fit < 1 else "") if fit else
                     "; the float32 gradient itself is infinite: no loss scale avoids it"))
        out.append(Finding(lay.name, "overflow", advice, SEVERITY["overflow"],
                           scale_code(fit) if scale_code and fit else None))
    return out


def backoff_params(layers: list[LayerStats]) -> list[str]:
    """The parameters whose gradient made a measured step skip, each with its module, in layer order."""
    return [f"{p} of {lay.type} {lay.name or '(model)'}" for lay in layers
            for p in (lay.param_grad_overflow or {}).get("params", [])]


def _names(params: list[str]) -> str:
    shown = ", ".join(params[:3])
    return shown + (f" and {len(params) - 3} more" if len(params) > 3 else "")


def scale_that_fits(layers: list[LayerStats], fmt: FloatFormat, mode: str, scale: float, backoffs: int,
                    suggested: float | None, forward_failed: bool = False) -> float | None:
    """The report's ``suggested_loss_scale``, one number for the whole document: the underflow
    findings' choice when they made one; else, when the audited steps skipped, a scale that does
    not -- the one the back-off ended at (measured finite), or, at a fixed scale whose parameter
    gradients overflow, :func:`fitting_scale` (the one the overflow finding names). After a non-finite
    forward (``forward_failed``) the gradients overflow as its consequence: no scale cures that, so only
    the underflow findings' own choice stands (issue #46)."""
    if mode != "fp16" or suggested is not None or forward_failed:
        return suggested
    if backoffs:
        return scale
    if any(lay.param_grad_nonfinite for lay in layers):
        return fitting_scale(layers, fmt)
    return None
