"""When the doctor and bench of one environment disagree, the report's verdicts say so."""

from __future__ import annotations

from ..bench.doctor_check import found


def _framework(view) -> str | None:
    doc = getattr(view, "doc", None)
    return getattr(doc, "framework", None) if doc is not None else None


def _threads(view):
    env = getattr(getattr(view, "doc", None), "environment", None) or {}
    n = (env.get("cpu") or {}).get("threads") if isinstance(env, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def doctor_side(view) -> dict:
    """A doctor page view as the shape :func:`ampkit.bench.doctor_check.found` reads."""
    return {"recommended": view.recommended, "threads": _threads(view),
            "modes": {r["mode"]: {"verdict": r.get("verdict"), "speedup": r.get("speedup"),
                                  "training_speedup": r.get("training_speedup"),
                                  "speedup_by_size": r.get("speedup_by_size")} for r in view.rows}}


def disagreements(env) -> list[dict]:
    """Verdict rows for every doctor/bench disagreement in one environment (``[]`` when they agree)."""
    out = []
    for dv in env.doctor:
        if dv.quick:
            continue  # a --quick doctor measured nothing: nothing to disagree with
        for bv in env.bench:
            if _framework(dv) and _framework(bv) and _framework(dv) != _framework(bv):
                continue
            for mode, text in found(doctor_side(dv), bv.rows, bv.workload, threads=_threads(bv)):
                out.append({"key": f"doctor vs bench {bv.workload}: {mode}", "text": f"they disagree: {text}",
                            "tone": "bad"})
    return out
