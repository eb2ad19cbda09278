"""Rendering of audit reports: a rich table sorted by severity, then the findings."""

from __future__ import annotations

import math
import textwrap
from collections import Counter

from rich.table import Table

from ..audit.core import SEVERITY, format_of, precision_threshold, rounding_unit
from .output import fmt, print_keras_line

_KIND_STYLE = {"nonfinite": "bold red", "overflow": "red", "underflow": "yellow", "contract": "yellow",
               "precision": "magenta"}


def _hr(x) -> str:
    if x is None or (isinstance(x, float) and math.isinf(x)):
        return "—"
    return f"{x:.1f}"


def _steps(report) -> str:
    if report.interrupted:
        return f"{report.completed} of {report.steps} step(s), interrupted"
    return f"{report.steps} step(s)"


def render(report, con) -> None:
    worst: dict[str, int] = {}
    for f in report.findings:
        worst[f.layer] = min(worst.get(f.layer, 9), SEVERITY.get(f.kind, 9))
    layers = sorted(report.layers, key=lambda lay: (worst.get(lay.name, 9), lay.fwd_headroom_log2))
    origin = report.first_nonfinite
    # headroom: log2(max finite / amax) in bits; underflow: share of the fp32 reference's nonzero values
    # that the format flushes to zero or subnormal (gradients at the loss scale)
    title = (f"ampkit audit — {report.workload or 'model'} ({report.framework}) in {report.mode} on {report.device}  ·  loss scale "
             f"{report.loss_scale:g}  ·  {_steps(report)}  ·  {len(report.layers)} modules")
    table = Table(title=title, title_justify="left")
    table.add_column("module", overflow="fold", min_width=12)
    # two-line headers keep the 11 fixed columns narrow enough for a 140-column log, so the module
    # names (the column that folds) keep their room
    for c in ("type", "amax", "headroom", "under-\nflow", "inf/\nnan", "grad\namax", "grad\nheadroom",
              "grad\nunderflow", "grad\ninf/nan", "rel\nerr"):
        table.add_column(c, no_wrap=True, justify="left" if c == "type" else "right")
    table.add_column("finding", overflow="fold", min_width=9)
    kinds: dict[str, list[str]] = {}
    for f in report.findings:
        kinds.setdefault(f.layer, []).append(f.kind)
    for lay in layers:
        mark = ""
        if origin and origin["name"] == lay.name:
            mark = f" ← first inf/NaN ({origin['phase']})"
        found = ", ".join(f"[{_KIND_STYLE.get(k, 'white')}]{k}[/]" for k in dict.fromkeys(kinds.get(lay.name, [])))
        table.add_row((lay.name or "(model)") + mark, lay.type, fmt(lay.fwd_amax, ".3g"), _hr(lay.fwd_headroom_log2),
                      f"{lay.fwd_underflow_frac:.1%}", str(lay.fwd_nonfinite), fmt(lay.grad_amax, ".3g"),
                      _hr(lay.grad_headroom_log2), f"{lay.grad_underflow_frac:.1%}", str(lay.grad_nonfinite),
                      fmt(lay.rel_error, ".2g"), found or "—")
    print_keras_line(report, con)
    if report.note:
        prefix = f"--mode {report.resolved_from}: " if report.resolved_from else "note: "
        con.print(prefix + report.note, markup=False, highlight=False)
    if report.layers or not report.interrupted:
        con.print(table)
    else:
        con.print(title, markup=False, highlight=False)
    out_err = report.output_rel_error
    if out_err is not None and report.completed:
        fmt_ = format_of(report.mode)
        words = (f"the model's output differs from float32 by {out_err:.2%} in {report.mode} "
                 f"({out_err / rounding_unit(fmt_):.0f}x its rounding unit)")
        if out_err > precision_threshold(fmt_) and not any(f.kind == "precision" for f in report.findings):
            words += ("; no single module makes that error (each passes on about what it receives): it is "
                      "many roundings, amplified along the way (BatchNorm over few values per channel does that)")
        con.print(words, markup=False, highlight=False)
    if not report.findings and report.completed == 0:
        con.print("[yellow]no audited step finished: nothing was measured[/]")
    elif not report.findings:
        within = f" in the {report.completed} step(s) that finished" if report.interrupted else ""
        con.print(f"[green]no findings: {report.mode} is numerically healthy for this model at loss scale "
                  f"{report.loss_scale:g}{within}[/]")
    if report.findings:
        levels = Counter(f.level for f in report.findings)
        con.print(f"{len(report.findings)} finding(s): " + ", ".join(f"{n} {lvl}" for lvl, n in levels.items()),
                  markup=False, highlight=False)
    for f in report.findings:
        con.print(f"[{_KIND_STYLE.get(f.kind, 'white')}]{f.level} {f.kind}[/] {f.layer or '(model)'}: ", end="")
        con.print(f.advice, markup=False, highlight=False)
        if f.code:
            con.print(textwrap.indent(f.code, "    "), markup=False, highlight=False)
