"""How an fp8 audit (``ampkit audit --mode fp8``) is shown: one row per Linear layer -- its output and
weight-gradient errors against fp32 in fp8 and in bf16, the shares its fp8 casts flush to zero, in
fp8 or why not -- then the advice. The document (``--json``) has every figure, ``saturated`` too."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table


def _pct(x) -> str:
    return "—" if x is None else f"{x:.2%}"


def _casts(entry: dict, key: str) -> str:
    casts = entry.get("casts") or {}
    if not casts:
        return "—"
    return " / ".join(_pct(casts[p].get(key)) if p in casts else "—" for p in ("input", "weight", "grad_output"))


def _why(entry: dict) -> str:
    """The layer's status in a few words: its advice pointer, or why it stayed in bf16."""
    if entry.get("converted"):
        return "see its finding" if entry.get("advice") else "fp8"
    reason = entry.get("reason") or "—"
    reason = reason.split(": kept", 1)[0].split(" (", 1)[0]
    return reason.replace("the first Linear layer", "first Linear").replace("the last Linear layer", "last Linear")


def render_fp8(report, con) -> None:
    converted = sum(bool((lay.fp8 or {}).get("converted")) for lay in report.layers)
    title = (f"ampkit audit — {report.workload or 'model'} ({report.framework}) in fp8 on {report.device}  ·  "
             f"{report.completed} step(s)  ·  {converted} of {len(report.layers)} Linear layers in fp8")
    table = Table(title=escape(title), title_justify="left")
    table.add_column("layer", overflow="fold", min_width=8)
    for c in ("type", "out err\nfp8", "out err\nbf16", "wgrad err\nfp8", "wgrad err\nbf16", "flushed\nin/w/grad"):
        table.add_column(c, no_wrap=True, justify="left" if c == "type" else "right")
    table.add_column("in fp8?", overflow="fold", min_width=12)
    saturated = []
    for lay in report.layers:
        e = lay.fp8 or {}
        out, wg = e.get("output") or {}, e.get("weight_grad") or {}
        table.add_row(escape(lay.name or "(model)"), escape(lay.type), _pct(out.get("fp8_vs_fp32")),
                      _pct(out.get("bf16_vs_fp32")), _pct(wg.get("fp8_vs_fp32")), _pct(wg.get("bf16_vs_fp32")),
                      _casts(e, "flushed_frac"), _why(e))
        if any((c.get("saturated_frac") or 0) > 0 for c in (e.get("casts") or {}).values()):
            saturated.append(f"{lay.name}: {_casts(e, 'saturated_frac')}")
    if report.note:
        con.print("note: " + report.note, markup=False, highlight=False)
    con.print(table)
    con.print("errors: relative to the float32 reference (||x - x_fp32|| / ||x_fp32||), the largest over the steps; "
              "flushed: nonzero values its fp8 casts (input / weight / output gradient) round to zero; "
              "saturated: " + ("; ".join(saturated) if saturated else "none (dynamic scaling)"),
              markup=False, highlight=False)
    if report.not_measured:
        con.print(f"[yellow]not measured:[/] {escape(report.not_measured)}", highlight=False)
    elif not report.findings:
        con.print(f"[green]no findings: fp8 is numerically healthy for this model in the {report.completed} step(s) "
                  "audited[/]")
    for f in report.findings:
        con.print(f"[magenta]{f.level} {f.kind}[/] {escape(f.layer or '(model)')}: ", end="")
        con.print(f.advice, markup=False, highlight=False)
