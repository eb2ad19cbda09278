"""What ``ampkit audit --what-if`` advises per format, in the framework's words (its
:class:`~ampkit.audit.core.Advice`), from the predictions of :mod:`.whatif`."""

from __future__ import annotations

from .core import Advice, converges

_LIST = 4  # modules named in one sentence before "and N more"


def _names(names: list[str]) -> str:
    shown = ", ".join(n or "(model)" for n in names[:_LIST])
    return shown + (f" and {len(names) - _LIST} more" if len(names) > _LIST else "")


def _code(advice: Advice, names: list[str]) -> str | None:
    return "\n".join(advice.fp32_hint(n) for n in names[:_LIST]) if names else None


def fp16_advice(p: dict, advice: Advice) -> tuple[str, str | None]:
    rng, flagged, default = p["loss_scale_range"], p["keep_in_fp32"], p["default_loss_scale"]
    bf16 = advice.bf16_code is not None and p.get("bf16_verdict", "safe") == "safe"  # offered only where predicted safe
    not_bf16 = f" (not bf16: predicted {p['bf16_verdict']} on this model)" if p.get("bf16_verdict", "safe") != "safe" else ""
    where = f"loss scales {rng[0]:g} to {rng[1]:g} keep every gradient finite and lose at most 1% of them" if rng else ""
    if p["verdict"] == "safe":
        return (f"fp16 is predicted safe: no module's float32 output exceeds 65504 and {advice.scaler}'s default "
                f"{advice.init_arg}={default:g} lies in the working range ({where})"), None
    if p["verdict"] == "safe_with_scale":
        pick = rng[0] if default < rng[0] else rng[1]
        return (f"fp16 works with a loss scale in [{rng[0]:g}, {rng[1]:g}] ({where}); the default {default:g} is "
                + ("too small: gradients underflow" if default < rng[0] else
                   f"too large: {advice.scaler} backs off from it, skipping steps")
                + f"; start at {pick:g}"), advice.scale_code(pick) if advice.scale_code else None
    first = p["first_overflow"]
    if p["verdict"] == "keep_in_fp32":
        return (f"fp16 needs {_names(flagged)} kept in float32"
                + (f" ({first} is the first to overflow 65504)" if first else "")
                + (f"; then {where}" if rng else "") + (" -- or train in bf16, which has float32's range"
                                                        if bf16 else not_bf16)), _code(advice, flagged)
    why = ("no loss scale keeps the gradients both finite and above fp16's underflow" if rng is None else
           f"{len(flagged)} modules overflow or underflow")
    limit = p.get("scaled_loss_limit")
    if rng is None and limit is not None:
        out = p["modules"][-1]["name"] if p["modules"] else ""
        return (f"fp16 is predicted unsafe: the loss is computed in float16 (the output layer's policy), so "
                f"the loss scale is cast to float16 and must stay below {limit:g}, and below that gradients "
                f"underflow; compute the output "
                f"layer ({out}) and the loss in float32" + (", or train in bf16" if bf16 else not_bf16)), advice.fp32_hint(out)
    if not bf16:
        return (f"fp16 is predicted unsafe: {why}; keep {_names(flagged)} in float32 or train in float32{not_bf16}"
                if flagged else f"fp16 is predicted unsafe: {why}; train in float32{not_bf16}"), _code(advice, flagged)
    return f"fp16 is predicted unsafe: {why}; train in bf16 instead", advice.bf16_code


def bf16_advice(p: dict, advice: Advice) -> tuple[str, str | None]:
    flagged = p["keep_in_fp32"]
    if p["verdict"] == "safe":
        return ("bf16 is predicted safe: float32's range (nothing overflows or underflows) and every module's "
                "rounding noise is small against the spread of its output; no loss scaling needed"), advice.bf16_code
    grown = [r for r in p["modules"] if r.get("carried_error") is not None and r["name"] in flagged]
    rest = [n for n in flagged if n not in {r["name"] for r in grown}]
    parts = [f"a bf16 run's error grows to {r['carried_error']:.1%} inside {r['name'] or '(model)'} (measured in one bf16 "
             "forward: what the layers before carry in, amplified there)" for r in grown[:_LIST]]
    if rest:
        parts.append(f"bf16 rounds away what matters in {_names(rest)}: its rounding noise is over 1/16 of the "
                     "output's own spread in float32 (or the values underflow)")
    keep = "; keep " + ("it" if len(flagged) == 1 else "them") + " in float32"
    return "; ".join(parts) + keep + (converges("bf16") if grown else ""), _code(advice, flagged)


def fp8_advice(p: dict, advice: Advice) -> tuple[str, str | None]:
    if not p["eligible"]:
        return "no matmul layer an fp8 recipe converts (Linear / Dense) ran: fp8 would change nothing", None
    failing = [m for m in p["modules"] if m["reasons"]]
    code = advice.fp8_code
    if p["verdict"] == "safe":
        return (f"fp8 (e4m3 forward, e5m2 gradients) with tensorwise scaling is predicted safe for all "
                f"{p['eligible']} matmul layers"), code([], "tensorwise") if code else None
    if p["verdict"] == "safe_with_scale":
        return (f"tensorwise fp8 fails {_names([m['name'] for m in failing])}; rowwise scaling fixes "
                + ("it" if len(failing) == 1 else "them") + " (predicted): use the rowwise recipe"), \
            code([], "rowwise") if code else None
    parts = []
    for m in failing:
        what = " and ".join(m["reasons"])
        fixed = m["fixed_by"]
        parts.append(f"{m['name']} ({what} loses too much: " + (f"fixed by {' or '.join(fixed)} scaling" if fixed else
                                                               "no scaling fixes it") + ")")
    keep = [m["name"] for m in failing if "rowwise" not in m["fixed_by"]]
    finer = sorted({s for m in failing for s in m["fixed_by"] if s != "rowwise"})
    text = (f"fp8 with tensorwise scaling fails {len(failing)} of {p['eligible']} matmul layers: " + "; ".join(parts[:_LIST])
            + (f"; and {len(parts) - _LIST} more" if len(parts) > _LIST else "")
            + f". Keep {_names(keep)} out of fp8 (in bf16 or float32)"
            + (f"; {' or '.join(finer)} scaling (not a float8 recipe of this framework: MX-style blocks or "
               "per-channel scales) would fix " + _names([m['name'] for m in failing if set(m['fixed_by']) & set(finer)])
               if finer else ""))
    return text, (code(keep, "rowwise" if any("rowwise" in m["fixed_by"] for m in failing) else "tensorwise")
                  if code else _code(advice, keep))


ADVISE = {"fp16": fp16_advice, "bf16": bf16_advice, "fp8": fp8_advice}


def add_advice(predictions: dict, advice: Advice) -> None:
    """Each format's prediction gains ``"advice"`` (words) and ``"code"`` (the fix as code, or None)."""
    for fmt, p in predictions.items():
        if p["verdict"] == "not_measured":
            p["advice"], p["code"] = f"not measured: {p['reason']}", None
            continue
        bad = p.get("float32_nonfinite")
        if bad is not None:  # advice that would work: none of float32, bf16 or a float32 island (issue #34)
            p["advice"], p["code"] = (f"the float32 run itself is non-finite (first in {bad or '(model)'}): this is not "
                                      f"a precision problem, and no format or module kept in float32 fixes it — look "
                                      f"for an exp/log/sqrt/division out of range or an exploding input there"), None
            continue
        p["advice"], p["code"] = ADVISE[fmt](p, advice)
