"""A precision plan proposed from an audit document: the smallest set of modules to keep in float32
(or, in fp8, out of fp8) that removes the audit's findings."""

from __future__ import annotations

from ..plan_format import Plan

__all__ = ["propose_plan"]

_FP32_FIX_KINDS = ("nonfinite", "overflow", "underflow", "precision")


def _smallest(names: list[str]) -> list[str]:
    uniq = list(dict.fromkeys(names))
    return [n for n in uniq if not any(n != o and n.startswith(o + ".") for o in uniq)]


def _from_findings(doc: dict) -> tuple[list[str], list[dict]]:
    names, why = [], []
    first = doc.get("first_nonfinite")
    if first and first.get("phase") == "forward" and not first.get("in_reference", doc.get("reference_nonfinite")):
        names.append(first["name"])
        why.append({"module": first["name"], "kind": "first_nonfinite", "step": first.get("step")})
    for f in doc.get("findings", []):
        if f.get("kind") not in _FP32_FIX_KINDS or "float32" not in (f.get("advice") or ""):
            continue
        if f.get("kind") == "nonfinite" and doc.get("reference_nonfinite"):
            continue
        names.append(f["layer"])
        why.append({"module": f["layer"], "kind": f["kind"], "advice": (f.get("advice") or "")[:300]})
    return names, why


def _float32_fails(doc: dict) -> str | None:
    """Where the float32 run itself is non-finite, by the audit's or the what-if's word, else None."""
    for p in (doc.get("what_if") or {}).values():
        if isinstance(p, dict) and p.get("float32_nonfinite") is not None:
            return p["float32_nonfinite"] or "(model)"
    first = doc.get("first_nonfinite") or {}
    if doc.get("reference_nonfinite") or first.get("in_reference"):
        return first.get("name") or "(model)"
    return None


def _from_fp8(doc: dict) -> tuple[list[str], list[dict]]:
    names, why = [], []
    for f in doc.get("findings", []):
        if f.get("kind") == "precision" and str(f.get("advice", "")).startswith("fp8:"):
            names.append(f["layer"])
            why.append({"module": f["layer"], "kind": "fp8", "advice": f["advice"][:300]})
    return names, why


def propose_plan(audit, framework: str | None = None, formats: tuple[str, ...] | None = None) -> Plan:
    """The plan an audit proposes (see docs/internals.md). ``audit``: an audit report or its
    document (``to_dict()``); ``framework`` is written into the plan (else the document's)."""
    doc = audit.to_dict() if hasattr(audit, "to_dict") else dict(audit)
    framework = framework or doc.get("framework")
    evidence: dict = {"from": "ampkit audit", "audited_mode": doc.get("mode"), "workload": doc.get("workload"),
                      "device": doc.get("device"), "steps": doc.get("steps")}
    what_if = doc.get("what_if")
    if what_if:
        order = [f for f in (formats or tuple(what_if)) if f in what_if]
        judged = [f for f in order if what_if[f].get("verdict") != "not_measured"]
        chosen = next((f for f in judged if what_if[f].get("verdict") != "unsafe"), judged[0] if judged else "fp32")
        keep = list(what_if.get(chosen, {}).get("keep_in_fp32") or [])
        default, entry = chosen, ("bf16" if chosen == "fp8" else "fp32")
        evidence.update({"from": "ampkit audit --what-if",
                         "what_if": {f: {"verdict": p.get("verdict"), "keep_in_fp32": p.get("keep_in_fp32")}
                                     for f, p in what_if.items()}})
        why = [{"module": n, "kind": "what_if"} for n in keep]
    elif doc.get("mode") == "fp8":
        default, entry = "fp8", "bf16"
        keep, why = _from_fp8(doc)
    else:
        default, entry = doc.get("mode") or "fp16", "fp32"
        keep, why = _from_findings(doc)
    broken = _float32_fails(doc)
    if broken:  # no plan makes such a model finite: the evidence says so first
        evidence["float32_nonfinite"] = (f"the float32 run is non-finite too (first in {broken}): no precision plan "
                                         "fixes this model, so none is proposed beyond the default")
    if "" in keep or "(model)" in keep:
        evidence["whole_model"] = ("a finding names the whole model, which no island can hold: the plan keeps "
                                   f"the default {default}; consider another mode")
    keep = _smallest([n for n in keep if n not in ("", "(model)")])
    evidence["because"] = why
    evidence["findings_before"] = len(doc.get("findings", []))
    return Plan(default, {n: entry for n in keep}, framework, evidence)
