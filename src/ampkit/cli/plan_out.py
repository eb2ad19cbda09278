"""Writing a precision plan from the command line: ``ampkit audit --plan`` and ``ampkit plan``."""

from __future__ import annotations

__all__ = ["use_line", "write_proposed", "summary"]


def use_line(plan, path: str) -> str:
    """The one line that applies the plan in the user's framework (the path as short as it can be said
    from the working folder: the CLI made its output paths absolute)."""
    import os

    rel = os.path.relpath(path) if os.path.isabs(path) else path
    path = rel if not rel.startswith("..") else path
    if plan.framework == "tensorflow":
        return f"mp = ampkit.keras.MixedPrecision.from_plan({path!r}); model = mp.prepare(model)"
    return f"mp = ampkit.MixedPrecision.from_plan({path!r}, model=model)"


def summary(plan) -> str:
    if not plan.modules:
        return f"everything in {plan.default}, no module kept apart"
    kept = ", ".join(f"{p} in {m}" for p, m in plan.modules.items())
    return f"{plan.default} with {kept}"


def write_proposed(report, path: str, framework: str, formats, con):
    """Propose the plan of an audit report, write it to ``path`` and say so (one line and its use)."""
    from ..plan import propose_plan

    fw = getattr(report, "framework", None) or (framework if framework != "auto" else None)
    plan = propose_plan(report, fw, formats)
    plan.save(path)
    con.print(f"plan written to {path}: {summary(plan)}")
    con.print(f"  use it: {use_line(plan, path)}")
    return plan
