"""What an audit finds, framework-neutral: per-layer statistics, findings with advice, the report.

Each backend measures (hooks on modules in PyTorch, per-layer outputs in Keras) and fills
:class:`LayerStats`; everything after that — headroom, underflow shares, findings, the suggested
loss scale — is decided here, once for every framework (the step loop and the report: :mod:`.driver`).
"""

from __future__ import annotations

import math

from ..formats import LOST_BITS, UNDERFLOW_THRESHOLD, FloatFormat, lost_below, module_limit, precision_threshold, rounding_unit
from .gradients import fitting_scale, param_findings, set_param_headroom
from .model_error import gradual_error_finding, grown_inside_finding
from .ops import Advice
from .origin import nonfinite_finding, once_per_cause
from .report import SEVERITY, Finding, LayerStats

#: a module is the origin of its error when its output error is at least this many times its inputs'
AMPLIFICATION = 2.0


def backoff_note(scaler: str, initial: float, final: float, skipped: int, params: list[str] | None = None) -> str:
    """What a default fp16 run does at its start, said as the audit saw it (not a finding: it is how
    dynamic loss scaling is meant to work). ``params``: the parameters whose gradient overflowed."""
    which = ""
    if params:
        which = f" (the gradient of {', '.join(params[:3])}{f' and {len(params) - 3} more' if len(params) > 3 else ''})"
    return (f"at {scaler}'s initial scale {initial:g} some gradients overflow fp16{which}, as dynamic loss scaling "
            f"expects: a default run skips its first {skipped} step(s), halving the scale each time, and trains at "
            f"{final:g}; the audit follows it and reports loss scale {final:g}")


def audit_mode_for_auto(resolve) -> tuple[str, str]:
    """``--mode auto``: the mode to audit and a note saying why. ``resolve() -> (mode, reason)`` is
    the backend's auto choice; fp16 or bf16 is audited as chosen, anything else (fp32, tf32: no
    low-precision numerics to audit) falls back to bf16, the mode with float32's range."""
    mode, reason = resolve()
    if mode in ("fp16", "bf16"):
        return mode, f"auto resolves to {mode} here ({reason}); audited {mode}"
    return "bf16", (f"auto resolves to {mode} here ({reason}), which has no low-precision numerics to audit; "
                    "audited bf16 instead (float32's range, no loss scaling)")


def findings_for(layers: list[LayerStats], fmt: FloatFormat, mode: str, scale: float, first_nonfinite,
                 reference_nonfinite: bool, advice: Advice, bf16_unhealthy: str | None = None
                 ) -> tuple[list[Finding], float | None]:
    """Findings with advice from per-layer statistics (framework-neutral; ``advice`` words the fixes
    in the user's framework). ``bf16_unhealthy``: why bf16 is no cure on this model (its own audit's
    finding, :func:`ampkit.audit.driver.audit_here`): then no finding offers bf16 and each that would have
    says why not (issue #46: one story)."""
    fp32_hint, scaler, init_arg, scale_code = advice.fp32_hint, advice.scaler, advice.init_arg, advice.scale_code
    offer_bf16 = mode == "fp16" and not bf16_unhealthy
    bf16_code = advice.bf16_code if offer_bf16 else None
    not_bf16 = f" (not bf16: {bf16_unhealthy})" if mode == "fp16" and bf16_unhealthy else ""
    limit = module_limit(fmt)

    def _fp32(name: str) -> str:
        one_line = fp32_hint(name)
        return f"`{one_line}`" if "\n" not in one_line else "autocast off for it, its inputs cast to float32: the finding's code"

    def _scale(value: float | None) -> str | None:
        return scale_code(value) if scale_code and value else None

    def _keep_fp32(lay: LayerStats, kind: str, what: str, who: str = "") -> Finding:
        """A forward finding whose fix is float32 for the module (``who``: named, with its code), or bf16 under fp16."""
        keep = f"keep {who} in float32 ({_fp32(lay.name)})" if who else "keep it in float32"
        return Finding(lay.name, kind, f"{what}: {keep}" + (" or train in bf16" if offer_bf16 else not_bf16),
                       SEVERITY[kind], fp32_hint(lay.name))

    by_name = {lay.name: lay for lay in layers}
    out: list[Finding] = []
    for lay in layers:
        lay.grad_headroom_log2 = fmt.headroom_log2(lay.grad_amax * scale) if lay.grad_amax else math.inf
    set_param_headroom(layers, fmt, scale)
    if first_nonfinite is not None:  # at its origin, advice only where it can help (.origin)
        out.append(nonfinite_finding(first_nonfinite, by_name.get(first_nonfinite["name"]), fmt, mode, scale,
                                     reference_nonfinite, advice, bf16_unhealthy))
    # overflow: the innermost modules whose fp32 outputs exceed the format's range
    over = [lay for lay in layers if lay.fwd_amax > fmt.max_finite and lay.in_format(fmt)]
    for lay in over:
        inner = any(o is not lay and o.name.startswith(lay.name + ".") if lay.name else o is not lay for o in over)
        if inner:
            continue
        out.append(_keep_fp32(lay, "overflow", f"outputs reach {lay.fwd_amax:.3g}, beyond {fmt.name}'s max "
                              f"{fmt.max_finite:g} (headroom {lay.fwd_headroom_log2:.1f} bits)", lay.name or "the model"))
    # gradient overflow at this loss scale (leaf modules: where the scaled gradient is produced)
    for lay in layers:
        # predicted from fp32's gradients, and raised only where the mode's pass really produced
        # inf/NaN there (a prediction the measurement contradicts is not a finding)
        if (mode == "fp16" and lay.leaf and lay.grad_amax and lay.grad_headroom_log2 < 0 and lay.grad_nonfinite
                and lay.in_format(fmt)):
            # an infinite float32 gradient (the reference fails too) fits no scale: no log2 of 0
            fit = 2.0 ** math.floor(math.log2(fmt.max_finite / 4 / lay.grad_amax)) if math.isfinite(lay.grad_amax) else None
            out.append(Finding(lay.name, "overflow",
                               f"gradients w.r.t. its output reach {lay.grad_amax:.3g}, times loss scale {scale:g} "
                               f"beyond fp16's max {fmt.max_finite:g}: {scaler} skips such steps and halves the "
                               f"scale" + (f"; {init_arg}={fit:g} or lower avoids it" + below_one(fit) if fit else
                                           "; the float32 gradient itself is infinite: no scale avoids it"),
                               SEVERITY["overflow"], _scale(fit)))
    # parameter gradients at this loss scale: what the scaler itself checks (ampkit.audit.gradients)
    # (not after a non-finite forward: every gradient downstream of it is inf/NaN as a consequence)
    if not (first_nonfinite and first_nonfinite.get("phase") == "forward"):
        out += param_findings(layers, fmt, mode, scale, scaler, init_arg, scale_code)
    # gradient underflow at this loss scale
    under = [lay for lay in layers if lost_signal(lay) > UNDERFLOW_THRESHOLD and lay.in_format(fmt)]
    suggested = _suggest_scale(layers, fmt, scale) if under and mode == "fp16" else None
    held = parameter_gradients_hold(layers, fmt) if under else None
    for lay in under:
        if held is not None:  # measured: what the optimizer gets is fine, so a note, and never "train in bf16"
            fix = (f"the parameters' gradients the optimizer gets stay within {held:.2%} of float32 (measured), so "
                   "this costs the step little" + (f"; {init_arg}={suggested:g} would lose less" if suggested else ""))
        elif mode == "fp16":
            fix = (f"the loss scale {scale:g} is too small for this model; {init_arg}={suggested:g} would fit "
                   + ("(or train in bf16)" if offer_bf16 else not_bf16.strip()) if suggested else
                   "no single loss scale fits both its smallest and largest gradients: "
                   + ("train in bf16" if offer_bf16 else f"keep this module in float32{not_bf16}"))
        else:
            fix = "keep this module in float32"
        code = _scale(suggested) if held is not None else \
            (_scale(suggested) or bf16_code or (None if offer_bf16 else fp32_hint(lay.name))) if mode == "fp16" \
            else fp32_hint(lay.name)
        out.append(Finding(lay.name, "underflow",
                           f"{lost_signal(lay):.0%} of its nonzero gradients are lost at loss scale {scale:g}"
                           + (f" (besides {lay.grad_noise_frac:.0%} that are float32 rounding noise, against float64)"
                              if lay.grad_noise_frac else "") + ": "
                           f"flushed to zero or below {lost_below(fmt):.2g} in {fmt.name}, where fewer than {LOST_BITS} "
                           f"significant bits remain ({lay.grad_underflow_frac:.0%} below the smallest normal "
                           f"{fmt.smallest_normal:.2g}): {fix}",
                           SEVERITY["precision"] if held is not None else SEVERITY["underflow"], code))
    for lay in layers:
        if lay.fwd_lost_frac > UNDERFLOW_THRESHOLD and lay.leaf and lay.in_format(fmt):
            out.append(_keep_fp32(lay, "underflow", f"{lay.fwd_lost_frac:.0%} of its nonzero outputs are lost in "
                                  f"{fmt.name}: flushed to zero or below {lost_below(fmt):.2g}, where fewer than {LOST_BITS} "
                                  f"significant bits remain ({lay.fwd_underflow_frac:.0%} below the smallest normal)"))
    # precision: leaf modules whose output differs from the fp32 reference by more than the format's
    # threshold and that make that error themselves (at least twice what their inputs bring: a module
    # that passes on an upstream error is not the one to keep in float32); fp8's layers have their own
    # advice against bf16 (ampkit.audit.fp8), not bf16's threshold
    for lay in layers:
        if mode == "fp8" or not (lay.leaf and lay.rel_error is not None and lay.rel_error > limit and lay.fwd_nonfinite == 0):
            continue
        received = lay.input_rel_error
        if received is not None and received * AMPLIFICATION > lay.rel_error:
            continue
        came_in = f"; its inputs differ by {received:.2%}" if received is not None else ""
        out.append(Finding(lay.name, "precision",
                           f"its output differs from float32 by {lay.rel_error:.1%} (relative) under {mode}, "
                           f"{lay.rel_error / rounding_unit(fmt):.0f}x {fmt.name}'s rounding unit "
                           f"(findings from {limit:.2%}){came_in}: with a {fmt.mantissa_bits}-bit "
                           f"mantissa this module cancels or amplifies rounding; keep it in float32: {_fp32(lay.name)}",
                           SEVERITY["precision"], fp32_hint(lay.name)))
    # the model's output: an error far beyond the format's that grew without a module to name (.model_error)
    # an error that grows past the limit between two modules: in their container's own code (.model_error)
    grown = grown_inside_finding(layers, fmt, mode, limit, AMPLIFICATION, out, _fp32)
    if grown:
        grown.code = fp32_hint(grown.layer)
        out.append(grown)
    gradual = gradual_error_finding(layers, fmt, mode, precision_threshold(fmt), rounding_unit(fmt), out)
    out += [gradual] if gradual else []
    out = once_per_cause(out, layers, reference_nonfinite, UNDERFLOW_THRESHOLD)
    out.sort(key=lambda f: f.severity)
    for f in out:
        if f.kind == "precision" and mode in ("fp16", "bf16"):
            f.advice += converges(mode)
    return out, suggested


def converges(mode: str) -> str:
    """What a precision note leaves open, said with it: the error is one forward's on the audited batch,
    and what it costs training is parity's to measure (issue #50: GPT-2 with q/k x300 has a 23% bf16
    error inside its attention and trains in bf16 as in float32, 3 seeds, by parity and a plain loop)."""
    return f" (an error of one forward on this batch; whether it costs convergence: `ampkit parity --modes fp32,{mode}`)"


def below_one(fit: float) -> str:
    """What a scale below 1 means, said beside it: a dynamic scaler goes there too (GradScaler has no floor)."""
    return (" (a scale below 1, where a dynamic scaler backs off to as well: the gradients are larger than fp16 "
            "holds unscaled)") if fit < 1 else ""


def parameter_gradients_hold(layers: list[LayerStats], fmt: FloatFormat) -> float | None:
    """The largest relative error of a layer's parameter gradients against the float32 reference's
    (``param_grad_rel_error``, measured by the backend on the unscaled gradients the optimizer applies)
    when every layer with parameters is within the format's precision threshold, else None (also when
    any is not measured). Then values lost in gradients w.r.t. outputs cost the step little: the
    underflow is a note, and its advice never "train in bf16" (whose gradients are coarser still)."""
    errs = [lay.param_grad_rel_error for lay in layers if lay.param_grad_amax]
    if not errs or any(e is None or e > precision_threshold(fmt) for e in errs):
        return None
    return max(errs)


def lost_signal(lay: LayerStats) -> float:
    """The share of its nonzero gradients lost at the loss scale, rounding noise of float32 itself left
    out where a float64 pass checked it (``grad_signal_lost_frac``): losing noise loses nothing."""
    return lay.grad_lost_frac if lay.grad_signal_lost_frac is None else min(lay.grad_lost_frac,
                                                                           lay.grad_signal_lost_frac)


def _suggest_scale(layers: list[LayerStats], fmt: FloatFormat, scale: float) -> float | None:
    """A power-of-two scale above ``scale`` lifting the gradients above the smallest normal without overflow.

    Judged from magnitudes only: the smallest gradient amax should land above the smallest normal
    with 2**10 to spare; the largest gradient -- w.r.t. an output or of a parameter, which a scaler
    checks -- must stay 2 bits below the max (:func:`~ampkit.audit.gradients.fitting_scale`). When
    ``scale`` already lifts the smallest amax, the largest scale that fits, if above ``scale``. None
    when no scale above ``scale`` fits: a smaller one loses more, so none is suggested.
    """
    amaxes = [lay.grad_amax for lay in layers if lay.grad_amax > 0 and math.isfinite(lay.grad_amax)]
    hi = fitting_scale(layers, fmt)
    if not amaxes or hi is None:
        return None
    lo = float(2 ** math.ceil(math.log2(fmt.smallest_normal * 2**10 / min(amaxes))))
    best = lo if lo > scale else hi
    return best if scale < best <= hi else None
