"""bench --compile in the table: the compiled columns' label, their rows and the graph-break lines."""

from __future__ import annotations

from ..words import row_label as label  # a row's column header, the same name explain's sentences use
from .output import fmt


def _breaks(n) -> str:
    return "— (Keras)" if n is None else (f"{n} (graph breaks!)" if n else "0")


def add_rows(line, res) -> None:
    """compile s, graph breaks, recompiles, vs eager: only when a row was compiled."""
    if not any(getattr(r, "compiled", False) for r in res):
        return
    line("compile s (untimed)", lambda r: fmt(r.compile_s, ".2f") if r.compiled else "—")
    line("graph breaks", lambda r: _breaks(r.graph_breaks) if r.compiled else "—")
    line("recompiles", lambda r: (fmt(r.recompiles, "d") if r.recompiles is not None else "— (Keras)")
         if r.compiled else "—")
    if any(r.speedup_vs_eager for r in res):
        line("speedup vs eager", lambda r: f"{r.speedup_vs_eager:.2f}x" if r.speedup_vs_eager else "—")


def notes(res) -> list[str]:
    """One line per compiled row whose model's graph broke, with dynamo's first reason."""
    out = []
    for r in res:
        if getattr(r, "graph_breaks", None):
            why = f": {r.graph_break_reasons[0]}" if r.graph_break_reasons else ""
            out.append(f"  {label(r)}: {r.graph_breaks} graph break(s) in the compiled model{why}")
    return out
