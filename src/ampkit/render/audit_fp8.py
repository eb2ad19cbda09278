"""How an fp8 audit (``ampkit audit --mode fp8``) is shown: one row per Linear layer -- converted to
fp8 or kept in bf16, its output and weight-gradient errors against fp32 in fp8 and in bf16, the
shares its fp8 casts flush to zero or saturate -- then the advice."""

from __future__ import annotations

from rich.table import Table

from .output import fmt


def _pct(x) -> str:
    return "—" if x is None else f"{x:.2%}"


def _casts(entry: dict, key: str) -> str:
    casts = entry.get("casts") or {}
    if not casts:
        return "—"
    return " / ".join(_pct(casts[p].get(key)) if p in casts else "—" for p in ("input", "weight", "grad_output"))


def render_fp8(report, con) -> None:
    title = (f"ampkit audit — {report.workload or 'model'} ({report.framework}) in fp8 on {report.device}  ·  "
             f"{report.completed} step(s)  ·  {sum(bool((lay.fp8 or {}).get('converted')) for lay in report.layers)} "
             f"of {len(report.layers)} Linear layers in fp8")
    table = Table(title=title, title_justify="left")
    table.add_column("layer", overflow="fold", min_width=10)
    for c in ("type", "fp8", "out err\nfp8", "out err\nbf16", "wgrad err\nfp8", "wgrad err\nbf16",
              "flushed\nin / w / grad", "saturated\nin / w / grad"):
        table.add_column(c, no_wrap=True, justify="left" if c in ("type", "fp8") else "right")
    table.add_column("why / advice", overflow="fold", min_width=20)
    for lay in report.layers:
        e = lay.fp8 or {}
        out, wg = e.get("output") or {}, e.get("weight_grad") or {}
        table.add_row(lay.name or "(model)", lay.type, "yes" if e.get("converted") else "no",
                      _pct(out.get("fp8_vs_fp32")), _pct(out.get("bf16_vs_fp32")), _pct(wg.get("fp8_vs_fp32")),
                      _pct(wg.get("bf16_vs_fp32")), _casts(e, "flushed_frac"), _casts(e, "saturated_frac"),
                      e.get("advice") or e.get("reason") or "—")
    if report.note:
        con.print("note: " + report.note, markup=False, highlight=False)
    con.print(table)
    con.print("errors: relative to the float32 reference (||x - x_fp32|| / ||x_fp32||), the largest over the steps; "
              f"the model's output differs from float32 by {fmt(report.output_rel_error, '.2%')} in fp8"
              if report.output_rel_error is not None else
              "errors: relative to the float32 reference (||x - x_fp32|| / ||x_fp32||), the largest over the steps",
              markup=False, highlight=False)
    if not report.findings:
        con.print(f"[green]no findings: fp8 is numerically healthy for this model in the {report.completed} step(s) "
                  "audited[/]")
    for f in report.findings:
        con.print(f"[magenta]{f.level} {f.kind}[/] {f.layer or '(model)'}: ", end="")
        con.print(f.advice, markup=False, highlight=False)
