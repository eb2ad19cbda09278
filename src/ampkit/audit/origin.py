"""Findings about where a run fails, framework-neutral: the first inf/NaN at its origin, advice only
where it could help, each cause once (issue #34).

- The first inf/NaN (``first_nonfinite``: ``{"name", "phase", "op", "in_reference"[, "cause",
  "received_by", "reference_origin", "inputs_amax", "reference_amax"]}``, the backend's) is one
  finding at the module that made it, naming the op. Keeping it in float32 is advised only when
  float32 computes it finitely (``in_reference`` false) and training in bf16 only when bf16's range
  covers what float32 computes there.
- When the fp32 reference is non-finite too, that is all the document says: float32 or bf16 cannot
  help, so no finding advises either (the per-module overflow, underflow and precision findings,
  judged against a non-finite reference, are withheld), and the upstream module whose outputs
  grew is named as the cause (``Finding.cause``).
- A statistic passed on unchanged (the same gradient through ``Dropout(p=0)``, ``Identity``, an
  activation's output the next module reads) is one cause: reported at the first module that holds
  it, naming the others.
"""

from __future__ import annotations

import math

from ..formats import BF16, FloatFormat
from .report import SEVERITY, Finding, LayerStats

#: findings judged against the fp32 reference's statistics: withheld when that reference is non-finite
REFERENCE_KINDS = ("overflow", "underflow", "precision")
#: gradients this many times smaller inside a container than at its output: made small there (ConvNeXt's
#: layer scale is 1e-6; a Linear's backward attenuates by a few times at most)
SHRINK = 2.0**8
#: two statistics this close are the same values passed on
SAME = 1e-6


def _where(first: dict) -> str:
    """``attn, made by matmul in its own code on inputs up to 255 and passed on to attn.o``."""
    name = first.get("name") or "(model)"
    op = first.get("op")
    if not op:
        return name
    ins = [a for a in first.get("inputs_amax") or [] if a is not None]
    return (f"{name}, made by {op} in its own code"
            + (f" on inputs up to {max(ins):.3g}" if ins and all(math.isfinite(a) for a in ins) else "")
            + (f" and passed on to {first['received_by']}" if first.get("received_by") else ""))


def nonfinite_finding(first: dict, lay: LayerStats | None, fmt: FloatFormat, mode: str, scale: float,
                      reference_nonfinite: bool, advice, bf16_unhealthy: str | None = None) -> Finding:
    """The finding for the first inf/NaN (see the module docstring); ``advice``: the backend's
    :class:`~ampkit.audit.core.Advice`; ``bf16_unhealthy``: why bf16 is no cure on this model (never offered then)."""
    not_bf16 = f" (not bf16: {bf16_unhealthy})" if mode == "fp16" and bf16_unhealthy else ""
    name, phase = first["name"], first["phase"]
    in_ref = bool(first.get("in_reference", reference_nonfinite))
    cause = first.get("cause")
    because = (f"; it began upstream in {cause['name']}: {cause['why']}" if cause and cause["name"] != name else
               f"; {name}: {cause['why']}" if cause else "")
    cause = cause if cause and cause["name"] != name else None   # a cause upstream of the finding's module
    where = _where(first)
    code = None
    if in_ref:
        text = (f"the first inf/NaN appears in the {phase} of {where}, and the fp32 reference is non-finite there "
                "too: this is not a precision problem — look for log/sqrt/division at 0 or an exploding input"
                f"{because or ' in that module'}")
    elif reference_nonfinite:
        ref = first.get("reference_origin")
        text = (f"the first inf/NaN of the {mode} run appears in the {phase} of {where}, but the fp32 reference is "
                f"non-finite too{' (in ' + ref['name'] + ')' if ref else ''}: no precision setting makes this step "
                f"finite, so this is not a precision problem{because}")
    elif phase == "forward":
        amax = first.get("reference_amax")
        bf16_fits = mode == "fp16" and not bf16_unhealthy and (amax is None or (math.isfinite(amax)
                                                                                and amax < BF16.max_finite))
        reach = (f"float32 computes it up to {amax:.3g}" if amax is not None and amax > fmt.max_finite else
                 f"float32's result is {amax:.3g}, so the overflow is inside {first.get('op')}" if amax is not None else
                 f"its fp32 outputs reach {lay.fwd_amax:.3g}" if lay else "")
        text = (f"the first inf/NaN of the {mode} run appears in the forward of {where}"
                + (f"; {reach}, {fmt.name}'s max is {fmt.max_finite:g}" if reach else "")
                + f": run it in float32 ({_fp32(advice, name)})"
                + (" or train in bf16, which has float32's range" if bf16_fits else not_bf16))
        code = advice.fp32_hint(name)
    else:
        text = (f"the first inf/NaN appears in the backward of {name or '(model)'} at loss scale {scale:g}: "
                + (f"{advice.scaler} skips such a step and halves the scale; if it happens every step, lower "
                   f"{advice.init_arg}" + (" or train in bf16" if not bf16_unhealthy else not_bf16) if mode == "fp16" else
                   "bf16 has float32's range, so look for an op whose gradient is infinite (sqrt/log at 0)"))
    return Finding(name, "nonfinite", text, SEVERITY["nonfinite"], code, dict(cause) if cause else None)


def _fp32(advice, name: str) -> str:
    one_line = advice.fp32_hint(name)
    return f"`{one_line}`" if "\n" not in one_line else "autocast off for it, its inputs cast to float32: the finding's code"


def _stat(lay: LayerStats, f: Finding) -> tuple | None:
    """The numbers a finding of ``lay`` rests on: equal numbers on neighbouring modules are one tensor's."""
    if f.kind == "overflow":
        return ("fwd", lay.fwd_amax) if "outputs reach" in f.advice else ("grad", lay.grad_amax)
    if f.kind == "underflow":
        return (("grad", lay.grad_amax, lay.grad_lost_frac) if "gradients are lost" in f.advice
                else ("fwd", lay.fwd_amax, lay.fwd_lost_frac))
    return None


def _same(a: tuple, b: tuple) -> bool:
    return a[0] == b[0] and all(math.isclose(x, y, rel_tol=SAME) for x, y in zip(a[1:], b[1:]))


def _ancestors(name: str):
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        yield ".".join(parts[:i])


def _grad_lost(f: Finding) -> bool:
    return f.kind == "underflow" and "gradients are lost" in f.advice


def by_scaling_container(findings: list[Finding], layers: list[LayerStats], threshold: float) -> list[Finding]:
    """Gradient-underflow findings of several modules inside one container whose *own output's*
    gradients are not lost and at least :data:`SHRINK` times larger: what lies between them and its
    output (a layer scale, a small constant on a branch) made them small -- one cause, one finding
    at the container."""
    by_name = {lay.name: lay for lay in layers}
    groups: dict[str, list[Finding]] = {}
    for f in findings:
        if not _grad_lost(f):
            continue
        mine = by_name[f.layer].grad_amax if f.layer in by_name else 0.0
        home = next((a for a in _ancestors(f.layer) if a in by_name and by_name[a]._grad_nz > 0
                     and by_name[a].grad_lost_frac <= threshold and by_name[a].grad_amax >= SHRINK * mine), None)
        if home is not None:
            groups.setdefault(home, []).append(f)
    out, done = [], set()
    for f in findings:
        home = next((h for h, fs in groups.items() if f in fs and len(fs) > 1), None)
        if home is None:
            out.append(f)
            continue
        if home in done:
            continue
        done.add(home)
        fs, lay = groups[home], by_name[home]
        inside = ", ".join(f"{g.layer.removeprefix(home + '.')} {by_name[g.layer].grad_lost_frac:.0%}" for g in fs)
        shrink = lay.grad_amax / max(by_name[g.layer].grad_amax for g in fs)
        fix = fs[0].advice.rsplit("): ", 1)[-1]
        out.append(Finding(home, "underflow",
                           f"gradients inside {home} are lost ({inside} of their nonzero values) while those of its "
                           f"own output are not ({lay.grad_lost_frac:.0%}): between its output and them they shrink "
                           f"{shrink:.3g}x (a layer scale or a small constant on a branch in its code) — one cause: {fix}",
                           fs[0].severity, fs[0].code))
    return out


def once_per_cause(findings: list[Finding], layers: list[LayerStats], reference_nonfinite: bool,
                   threshold: float) -> list[Finding]:
    """Findings as the module docstring says (``threshold``: the underflow share that makes a finding):
    judged-against-reference findings withheld when the reference is non-finite; gradient underflow
    made by one container's own code reported once at it (:func:`by_scaling_container`); a run of
    neighbouring leaf modules (execution order) holding the same statistic reported once, at the
    first of them; a container passing on an inner module's statistic reported at that module."""
    if reference_nonfinite:
        return [f for f in findings if f.kind not in REFERENCE_KINDS]
    findings = by_scaling_container(findings, layers, threshold)
    order = [lay for lay in layers if lay.leaf]
    pos = {lay.name: i for i, lay in enumerate(order)}
    by_name = {lay.name: lay for lay in layers}
    keyed: dict[tuple[str, str], Finding] = {(f.layer, f.kind): f for f in findings}
    dropped: set[int] = set()
    for f in findings:
        if id(f) in dropped or f.layer not in pos:
            continue
        mine = _stat(by_name[f.layer], f)
        if mine is None:
            continue
        same = []
        for nxt in order[pos[f.layer] + 1:]:
            other = keyed.get((nxt.name, f.kind))
            theirs = _stat(nxt, other) if other is not None else None
            if theirs is None or not _same(mine, theirs):
                break
            same.append(nxt.name)
            dropped.add(id(other))
        if same:
            f.advice += (f" (the same values pass on unchanged through {', '.join(same)}: one cause, "
                         "reported here once)")
    # a container passing on its inner module's output (a Sequential's last layer, the model's head): the
    # same statistic under the same finding kind is the inner module's, reported there
    for f in findings:
        if f.layer in by_name and not by_name[f.layer].leaf and id(f) not in dropped:
            mine = _stat(by_name[f.layer], f)
            if mine is not None and any(
                    g is not f and g.kind == f.kind and g.layer in by_name and id(g) not in dropped
                    and (g.layer.startswith(f.layer + ".") if f.layer else True)
                    and (theirs := _stat(by_name[g.layer], g)) is not None and _same(mine, theirs) for g in findings):
                dropped.add(id(f))
    return [f for f in findings if id(f) not in dropped]
