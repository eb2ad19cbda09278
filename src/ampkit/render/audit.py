"""How an audit report is shown: the console table (sorted by severity) and its findings, the
chart of the report's page, and the page's rows and verdicts."""

from __future__ import annotations

import math
import textwrap
from collections import Counter
from dataclasses import dataclass

from rich.markup import escape
from rich.table import Table

from ..formats import format_of, precision_threshold, rounding_unit
from ..words import SEVERITY, SEVERITY_LABEL
from . import charts
from .output import check_per, csv_of, finite, fmt, head, one_section, print_keras_line

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


_VERDICT_STYLE = {"safe": "green", "safe_with_scale": "cyan", "keep_in_fp32": "yellow", "unsafe": "bold red",
                  "not_measured": "dim"}


def render_whatif(report, con) -> None:
    """``--what-if``: one row per format (verdict, first overflow, fp16's loss-scale range, the modules
    to keep out), then each format's advice and code."""
    title = (f"ampkit audit --what-if — {report.workload or 'model'} ({report.framework}) on {report.device}  ·  "
             f"float32, {_steps(report)}  ·  {len(report.layers)} modules  ·  fp16 shares at loss scale "
             f"{report.loss_scale:g}")
    table = Table(title=escape(title), title_justify="left")  # a path with [x] in it is no markup
    for c in ("format", "verdict", "first overflow", "loss-scale range", "modules to keep out"):
        table.add_column(c, overflow="fold")
    for name, p in report.what_if.items():
        rng = p.get("loss_scale_range")
        keep = p.get("keep_in_fp32") or []
        table.add_row(name, f"[{_VERDICT_STYLE.get(p['verdict'], 'white')}]{p['verdict']}[/]",
                      escape(p.get("first_overflow") or "—"), f"[{rng[0]:g}, {rng[1]:g}]" if rng else "—",
                      (", ".join(escape(n) or "(model)" for n in keep[:6]) + (f" (+{len(keep) - 6})" if len(keep) > 6 else ""))
                      or "—")
    print_keras_line(report, con)
    if report.note:
        con.print("note: " + report.note, markup=False, highlight=False)
    con.print(table)
    for name, p in report.what_if.items():
        con.print(f"[{_VERDICT_STYLE.get(p['verdict'], 'white')}]{name}[/] ", end="")
        con.print(p.get("advice", ""), markup=False, highlight=False)
        if p.get("code"):
            con.print(textwrap.indent(p["code"], "    "), markup=False, highlight=False)


def render(report, con) -> None:
    if getattr(report, "what_if", None) is not None:
        render_whatif(report, con)
        return
    if report.mode == "fp8":  # one row per Linear: fp8 or bf16, its errors, its casts (render.audit_fp8)
        from .audit_fp8 import render_fp8

        render_fp8(report, con)
        return
    worst: dict[str, int] = {}
    for f in report.findings:
        worst[f.layer] = min(worst.get(f.layer, 9), SEVERITY.get(f.kind, 9))
    layers = sorted(report.layers, key=lambda lay: (worst.get(lay.name, 9), lay.fwd_headroom_log2))
    origin = report.first_nonfinite
    # headroom: log2(max finite / amax) in bits; underflow: share of the fp32 reference's nonzero values
    # that the format flushes to zero or subnormal (gradients at the loss scale)
    title = (f"ampkit audit — {report.workload or 'model'} ({report.framework}) in {report.mode} on {report.device}  ·  loss scale "
             f"{report.loss_scale:g}  ·  {_steps(report)}  ·  {len(report.layers)} modules")
    table = Table(title=escape(title), title_justify="left")
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
        if origin and same_module(origin["name"], lay.name):
            mark = f" ← first inf/NaN ({origin['phase']})"
        found = ", ".join(f"[{_KIND_STYLE.get(k, 'white')}]{k}[/]" for k in dict.fromkeys(kinds.get(lay.name, [])))
        table.add_row(escape(lay.name or "(model)") + mark, escape(lay.type), fmt(lay.fwd_amax, ".3g"), _hr(lay.fwd_headroom_log2),
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
        con.print(f"[{_KIND_STYLE.get(f.kind, 'white')}]{f.level} {f.kind}[/] {escape(f.layer or '(model)')}: ", end="")
        con.print(f.advice, markup=False, highlight=False)
        if f.code:
            con.print(textwrap.indent(f.code, "    "), markup=False, highlight=False)


# ---------------------------------------------------------------- the report's page
#: audit findings' severities, most severe first (ampkit.audit.report.Finding.level)
SEVERITIES = ("error", "warning", "note")


@dataclass
class AuditView:
    """An audit document as the report's page shows it: layers in execution order, findings."""

    doc: object  # the ampkit.report.load.Document it came from (None for a fresh report)
    workload: str
    mode: str
    device: str
    loss_scale: float
    steps: int | None
    first: dict | None
    findings: list[dict]
    layers: list[dict]
    suggested_loss_scale: float | None
    chart: str = ""
    chart_id: str = ""
    what_if: list = None  # --what-if: one row per format (format, verdict, first_overflow, range, keep, advice)
    what_if_doc: dict = None  # the document's what_if section (the chart reads its modules)
    not_measured: str | None = None  # why nothing could be judged (AuditReport.not_measured): never "clean" then

    @property
    def summary(self) -> str:
        """"clean", or the findings counted by severity (never "clean" with one); "not measured"
        when nothing was observed."""
        if self.not_measured and not self.findings:
            return "not measured"
        return findings_summary(self.findings)[0]

    @property
    def summary_tone(self) -> str:
        if self.not_measured and not self.findings:
            return "muted"
        return findings_summary(self.findings)[1]


def page_view(report, doc=None) -> AuditView:
    first = report.first_nonfinite
    kinds: dict[str, list[str]] = {}
    for f in report.findings:
        kinds.setdefault(f.layer, []).append(f.kind)
    layers = []
    for i, lay in enumerate(report.layers):
        layers.append({"index": i, "name": lay.name or "(model)", "raw_name": lay.name, "type": lay.type,
                       "fwd_amax": finite(lay.fwd_amax), "fwd_headroom": finite(lay.fwd_headroom_log2),
                       "fwd_underflow": finite(lay.fwd_underflow_frac) or 0.0, "fwd_nonfinite": lay.fwd_nonfinite or 0,
                       "grad_amax": finite(lay.grad_amax), "grad_headroom": finite(lay.grad_headroom_log2),
                       "grad_underflow": finite(lay.grad_underflow_frac) or 0.0,
                       "grad_nonfinite": lay.grad_nonfinite or 0, "rel_error": finite(lay.rel_error),
                       "first": bool(first and same_module(first["name"], lay.name)),
                       "kinds": list(dict.fromkeys(kinds.get(lay.name, [])))})
    findings = [{"layer": f.layer or "(model)", "kind": f.kind, "advice": f.advice,
                 "severity": SEVERITY_LABEL.get(f.severity, "finding"),
                 "first": bool(first and same_module(first["name"], f.layer) and f.kind == "nonfinite")}
                for f in report.findings]
    steps = report.steps if isinstance(report.steps, int) and not isinstance(report.steps, bool) else None
    view = AuditView(doc, str(report.workload or "model"), report.mode, str(report.device or "—"),
                     float(report.loss_scale), steps, first, findings, layers, finite(report.suggested_loss_scale))
    view.not_measured = report.not_measured
    if getattr(report, "what_if", None):
        view.what_if_doc = report.what_if
        view.what_if = [{"format": name, "verdict": str(p.get("verdict")), "first_overflow": p.get("first_overflow"),
                         "range": (f"[{p['loss_scale_range'][0]:g}, {p['loss_scale_range'][1]:g}]"
                                   if _pair(p.get("loss_scale_range")) else None),
                         "keep": [str(n) or "(model)" for n in (p.get("keep_in_fp32") or [])],
                         "advice": str(p.get("advice") or "")} for name, p in report.what_if.items()]
    return view


def _pair(v) -> bool:
    return isinstance(v, list) and len(v) == 2 and all(isinstance(x, (int, float)) for x in v)


def findings_summary(findings: list[dict]) -> tuple[str, str]:
    """("29 findings: 3 errors, 20 warnings, 6 notes", tone) -- never "clean" when there is one.
    Tone: bad with an error, neutral with a warning (or findings of unknown severity), muted for notes only."""
    if not findings:
        return "clean", "good"
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.get("severity") or "finding"] = counts.get(f.get("severity") or "finding", 0) + 1
    n = len(findings)
    parts = [f"{counts[s]} {s}{'s' * (counts[s] != 1)}" for s in (*SEVERITIES, "finding") if counts.get(s)]
    text = f"{n} finding{'s' * (n != 1)}" + (f": {', '.join(parts)}" if set(counts) != {"finding"} else "")
    tone = "bad" if counts.get("error") else "neutral" if counts.get("warning") or counts.get("finding") else "muted"
    return text, tone


def verdicts(view: AuditView) -> list[dict]:
    if view.what_if:
        worst = max((WHAT_IF_RANK.get(r["verdict"], 3) for r in view.what_if), default=0)
        text = " · ".join(f"{r['format']} {r['verdict']}" for r in view.what_if)
        return [{"key": f"audit --what-if {view.workload}", "text": text,
                 "tone": ("good", "neutral", "neutral", "bad")[worst]}]
    text, tone = view.summary, view.summary_tone
    if view.first:
        first = f"inf/NaN first in {view.first['name'] or '(model)'} ({view.first['phase']})"
        text, tone = (f"{first}; {text}" if view.findings else first), "bad"
    return [{"key": f"audit {view.workload}: {view.mode}", "text": text, "tone": tone}]


WHAT_IF_RANK = {"safe": 0, "not_measured": 1, "safe_with_scale": 1, "keep_in_fp32": 2, "unsafe": 3}


def figure(view: AuditView):
    if view.what_if_doc:
        from .audit_whatif import whatif_figure

        return whatif_figure(view)
    return layers_figure(view)


def layers_figure(view: AuditView):
    """Per layer, in execution order: headroom in bits above (forward output, and gradient at the
    loss scale; below 0 overflows), underflow shares below; the first layer with inf/NaN is marked
    in red and labelled. None without layers."""
    from matplotlib.figure import Figure

    layers = view.layers
    if not layers:
        return None
    fig = Figure(figsize=(min(max(6.5, 0.3 * len(layers) + 2), 14.0), 4.8), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    xs = list(range(len(layers)))
    cap = 40.0  # beyond +-40 bits (or infinite: an all-zero tensor) bars are drawn at the cap
    w = 0.4
    grad_color = "#8c564b"

    def capped(v):
        return cap if v is None else max(-cap, min(cap, v))

    top.bar([x - w / 2 for x in xs], [capped(lay["fwd_headroom"]) for lay in layers], w,
            color=charts.color(view.mode), label="forward output")
    top.bar([x + w / 2 for x in xs], [capped(lay["grad_headroom"]) for lay in layers], w, color=grad_color,
            label="gradient (at the loss scale)")
    top.axhline(0, color="black", lw=0.8)
    top.set_ylabel("headroom\n(log2 bits)")
    fig.suptitle(f"{view.workload} in {view.mode}, loss scale {view.loss_scale:g}: per layer in execution order",
                 fontsize=10)
    top.legend(fontsize=7, frameon=False, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncols=2, borderaxespad=0)
    bottom.bar([x - w / 2 for x in xs], [lay["fwd_underflow"] * 100 for lay in layers], w,
               color=charts.color(view.mode), label="forward underflow")
    bottom.bar([x + w / 2 for x in xs], [lay["grad_underflow"] * 100 for lay in layers], w,
               color=grad_color, label="gradient underflow")
    bottom.axhline(5, color="black", lw=0.6, ls=":")
    bottom.set_ylabel("underflow (%)")
    bottom.set_ylim(0, max([5.0] + [max(lay["fwd_underflow"], lay["grad_underflow"]) * 100 for lay in layers]) * 1.2)
    for lay in layers:
        if lay["first"]:
            for ax in (top, bottom):
                ax.axvspan(lay["index"] - 0.5, lay["index"] + 0.5, color=charts.BAD, alpha=0.15, lw=0)
                ax.axvline(lay["index"], color=charts.BAD, lw=1.2, ls="--")
            top.annotate(f"first inf/NaN: {lay['name']} ({view.first['phase']})", (lay["index"], 0.97),
                         xycoords=("data", "axes fraction"), xytext=(-6, 0), textcoords="offset points",
                         color=charts.BAD, fontsize=8, va="top", ha="right", fontweight="bold")
    step = max(1, math.ceil(len(layers) / 40))
    bottom.set_xticks(xs[::step])
    bottom.set_xticklabels([_short(lay["name"]) for lay in layers[::step]], rotation=60, ha="right", fontsize=7)
    for tick, lay in zip(bottom.get_xticklabels(), layers[::step]):
        if lay["first"]:
            tick.set_color(charts.BAD)
            tick.set_fontweight("bold")
    return fig


def same_module(a: str | None, b: str | None) -> bool:
    """Two module names of one document name the same module (the root: ``""`` or ``(model)``)."""
    return a is not None and b is not None and (a or "(model)") == (b or "(model)")


def _short(name: str, limit: int = 22) -> str:
    return name if len(name) <= limit else "…" + name[-(limit - 1):]

# ---------------------------------------------------------------- the notebook and to_pandas()
sections, headline = one_section("audit")


def line(view: AuditView) -> str:
    verdict = verdicts(view)[0]["text"]
    if view.what_if:  # float32 steps only: the verdicts are per format, not of the mode
        return f"audit --what-if {view.workload} on {view.device}: {verdict}"
    return f"audit {view.workload} in {view.mode} on {view.device}: {verdict}"


def rows(result, per: str | None = None) -> list[dict]:
    """``to_pandas()``: one row per layer, in execution order (a trainer callback's record writes an audit document)."""
    check_per(per, row="layer")
    doc = result.to_dict()
    first = doc.get("first_nonfinite") or {}
    kinds: dict[str, list[str]] = {}
    for f in doc.get("findings") or []:
        kinds.setdefault(f.get("layer"), []).append(f.get("kind"))
    return [{"workload": doc.get("workload"), **head(doc), "mode": doc.get("mode"), "loss_scale": doc.get("loss_scale"),
             "index": i, **lay, "first_nonfinite": same_module(first.get("name"), lay.get("name")) if first else False,
             "findings": list(dict.fromkeys(kinds.get(lay.get("name"), [])))}
            for i, lay in enumerate(doc.get("layers") or [])]


to_csv = csv_of(rows)
