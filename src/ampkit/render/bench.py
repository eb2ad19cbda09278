"""How a bench report is shown: the console table, the CSV, the chart (``--plot`` and the report's
page), and the report page's rows and verdicts."""

from __future__ import annotations

from dataclasses import dataclass

from rich.table import Table

from ..stats import FASTER, SAME, SLOWER, SMALL, Estimate, classify, ratio_text
from ..words import CATEGORIES, HOST_IDLE, THRESHOLD, describe
from . import bench_compile, charts
from .output import (
    NONE_FINISHED,
    PageView,
    check_per,
    finite,
    flat,
    fmt,
    fmt_bytes,
    fmt_memory_ratio,
    head,
    one_section,
    pair,
    print_keras_line,
    tone,
    write_csv,
)

CSV_COLUMNS = ["mode", "status", "error", "batch_size", "samples_per_s", "step_ms_p50", "step_ms_p90",
               "peak_memory_bytes", "max_batch_size", "speedup_vs_fp32", "memory_saving_vs_fp32",
               "skipped_steps", "final_loss", "tflops", "mfu", "repeats", "speedup_ci_low", "speedup_ci_high",
               "resolved_from", "warmup_skipped_steps", "speedup_verdict", "flags", "warning", "emulated",
               "compiled", "compile_s", "graph_breaks", "recompiles", "speedup_vs_eager"]
_STATUS_STYLE = {"ok": "green", "unsupported": "dim", "oom": "yellow", "error": "bold red"}
#: bench flags (see ampkit.bench.judge) in words
FLAG_WORDS = {"diverged": "loss diverged", "all_timed_steps_skipped": "all steps skipped"}
_VERDICT_STYLE = {"faster": "green", "slower": "red", "baseline": "dim"}


def _status(r) -> str:
    if r.status == "ok" and r.flags:
        return "[bold yellow]ok, " + ", ".join(FLAG_WORDS.get(f, f) for f in r.flags) + "[/]"
    if r.status == "ok" and r.emulated:  # fp8 without fp8 hardware: never a bare "ok" (issue #49)
        return "[yellow]ok, emulated[/]"
    return f"[{_STATUS_STYLE.get(r.status, '')}]{r.status}[/]"


def _speedup(r) -> str:
    if r.speedup_vs_fp32 is not None:
        return ratio_text(r.speedup_vs_fp32) + "x"
    return "none claimed" if r.flags else "—"


def _verdict(r) -> str:
    if r.mode == "fp32" or r.speedup_verdict == "baseline":
        return "[dim]baseline[/]"
    if r.flags:
        return "[yellow]see below[/]"
    if r.speedup_verdict is None:
        return "no interval" if r.speedup_vs_fp32 is not None else "—"
    word = describe(r.speedup_verdict).split(" (")[0]
    style = _VERDICT_STYLE.get(r.speedup_verdict)
    return f"[{style}]{word}[/]" if style else word


def _skipped(count, total) -> str:
    return f"{count} of {total}" if total is not None else str(count)


def caption(report) -> list[str]:
    """How the speedup and its interval were computed, in the table's words (printed under it)."""
    repeats = (report.config.get("repeats") or 1) > 1
    from ..threads import clock_words, footer

    threads = footer(report.environment.get("cpu"), accelerator=str(report.device).startswith(("cuda", "GPU")))
    tail = ([threads + "."] if threads else []) + clock_words(report.results)
    if getattr(report, "pairing", None) == "interleaved":
        rounds = max((r.rounds or 0 for r in report.results), default=0)
        from ..bench.rounds import sets_line
        sets = [] if repeats else [line for line in [sets_line(report.results)] if line]
        return [f"speedup = the median over {rounds} interleaved rounds (every mode's process alive, a block of steps "
                "each, the order flipped every round) of the mode's samples/s ÷ fp32's in the same round (a round: its fastest step).",
                *sets,
                "95% interval: the order statistics of those paired ratios that hold the median 95% of the time "
                "whatever their distribution (from 6 rounds; below, their range: 50% at 2 rounds, 94% at 5).",
                f"vs fp32: faster/slower only when the interval's end clears {THRESHOLD:.2f}x (the doctor's rule); "
                "no measurable difference when the interval holds 1."] + tail
    how = ("95% interval: bootstrap over the repeats, each resampled together with fp32's run of the same repeat."
           if repeats else
           "95% interval: bootstrap over this run's timed steps (step-to-step noise only; --repeats N adds what "
           "changes between runs).")
    return [f"speedup = samples/s ÷ fp32's samples/s = fp32's median step time ÷ this mode's "
            f"(samples/s = batch ÷ step ms p50{', medians over the repeats' if repeats else ''}).",
            how,
            f"vs fp32: faster = the interval's low end clears {THRESHOLD:.2f}x; slower = its high end is below "
            f"1/{THRESHOLD:.2f} (the doctor's rule); no measurable difference = the interval holds 1; small difference = "
            f"the interval excludes 1 but stays within {THRESHOLD:.2f}x; no interval = too few timed steps to tell; "
            "see below = no speedup claimed (the flag is named below)."] + tail


def render(report, con) -> None:
    if report.note:
        con.print(f"[bold]{report.note}[/]")
    flops = f"  ·  {report.flops_per_sample / 1e9:.3g} GFLOP/sample (fwd+bwd)" if report.flops_per_sample else ""
    world = f"  ·  world size {report.world_size}" if report.world_size > 1 else ""
    if getattr(report, "replicas", 1) > 1:
        world += f"  ·  {report.replicas} replicas in sync (batch = global batch)"
    cfg = report.config
    repeats = f", {cfg['repeats']} interleaved repeats (medians)" if (cfg.get("repeats") or 1) > 1 else ", one run"
    if getattr(report, "pairing", None) == "interleaved":
        repeats += ", modes timed in interleaved rounds"
    inputs = f"  ·  inputs {_inputs(report.sample_inputs)}" if getattr(report, "sample_inputs", None) else ""
    # the title as lines of their own: a table's title folds to the table's (narrow) width
    title = (f"ampkit bench — {report.workload} ({report.framework}) on {report.device}{world}{flops}{inputs}  ·  "
             f"{cfg.get('steps')} timed steps after {cfg.get('warmup')} warm-up{repeats}")
    table = Table()
    table.add_column("", no_wrap=True)
    for r in report.results:
        table.add_column(bench_compile.label(r) + (" (emulated)" if r.emulated else ""), no_wrap=True, justify="right")
    res = report.results

    def line(label, cell):
        table.add_row(label, *[cell(r) if r.status == "ok" else "—" for r in res])

    table.add_row("status", *[_status(r) for r in res])
    line("batch size", lambda r: fmt(r.batch_size, "d"))
    line("samples/s", lambda r: fmt(r.samples_per_s, ",.1f"))
    line("step ms p50", lambda r: fmt(r.step_ms.get("p50"), ".2f"))
    line("step ms p90", lambda r: fmt(r.step_ms.get("p90"), ".2f"))
    line("speedup vs fp32", _speedup)
    line("95% interval", lambda r: f"{ratio_text(r.speedup_ci[0])}-{ratio_text(r.speedup_ci[1])}x" if r.speedup_ci and r.mode != "fp32"
         else "—")
    line("vs fp32", _verdict)
    line("peak memory", lambda r: fmt_bytes(r.peak_memory_bytes))
    line("memory vs fp32", lambda r: "baseline" if r.mode == "fp32" else fmt_memory_ratio(r.memory_saving_vs_fp32))
    if any(r.max_batch_size for r in res):
        line("max batch size", lambda r: fmt(r.max_batch_size, "d"))
    line("skipped steps", lambda r: _skipped(r.skipped_steps, r.steps))
    line("skipped in warm-up", lambda r: _skipped(r.warmup_skipped_steps or 0, r.warmup))
    line("final loss", lambda r: fmt(r.final_loss, ".4g"))
    line("TFLOP/s", lambda r: fmt(r.tflops, ".3g"))
    line("MFU", lambda r: (fmt(r.mfu * 100, ".1f") + "%") if r.mfu is not None else "—")
    bench_compile.add_rows(line, res)  # --compile
    cats = breakdown_categories(res)
    for cat in cats:  # --explain: the step by category, share (ms)
        line(f"  {cat}", lambda r, c=cat: (f"{r.breakdown.get(c, 0.0):.0%} ({(r.breakdown_ms or {}).get(c, 0.0):.2f} ms)"
                                           if r.breakdown else "—"))
    from ..bench.judge import audit_lines  # the audit command for a mode that overflowed
    errors = [(f"  {r.mode}: {r.error}", False) for r in res if r.error] + [(ln, True) for ln in audit_lines(report)]
    print_keras_line(report, con)
    con.print(title, markup=False, highlight=False, style="bold")
    con.print(table)
    if any(r.status == "ok" and r.mode != "fp32" for r in res):
        for text in caption(report):
            con.print(text, markup=False, highlight=False, style="dim")
    for text in bench_compile.notes(res):
        con.print(text, markup=False, highlight=False, style="yellow")
    if getattr(report, "load_change", None):
        con.print(report.load_change["line"], markup=False, highlight=False, style="yellow")
    for r in res:
        if r.resolved_from:
            con.print(f"{r.mode} ran for {r.resolved_from}: {r.resolved_reason}", markup=False, highlight=False)
            if r.speedup_verdict == "slower" and r.mode != "fp32":  # auto's choice lost to fp32 in this very run
                con.print(f"  {r.resolved_from} chose {r.mode} from the figure above, but in this run {r.mode} measured "
                          f"{ratio_text(r.speedup_vs_fp32)}x fp32 [{ratio_text(r.speedup_ci[0])}, "
                          f"{ratio_text(r.speedup_ci[1])}]: slower than fp32 "
                          "on this workload", markup=False, highlight=False, style="yellow")
    for r in res:
        if r.status == "ok" and r.flags:
            con.print(f"  {r.mode}: flagged, no speedup claimed: {r.warning}", markup=False, highlight=False,
                      style="yellow")
    for r in res:
        if r.status == "ok" and not r.flags and r.mode != "fp32" and r.speedup_verdict in ("no measurable difference",):
            con.print(f"  {r.mode}: no measurable difference from fp32 (interval "
                      f"{ratio_text(r.speedup_ci[0])}-{ratio_text(r.speedup_ci[1])}x holds 1)", markup=False, highlight=False)
    for r in res:
        if r.emulated and r.status == "ok":  # fp8 without fp8 hardware: numerics and memory, not speed
            con.print(f"  {r.mode}: emulated (torchao or Keras float8; this hardware has no fp8): its loss and memory are real, "
                      "its time is the emulation's, so no speedup is claimed", markup=False, highlight=False,
                      style="yellow")
    for r in res:
        if r.explanation:  # --explain's sentences, computed from the breakdowns against fp32's
            con.print(f"why {bench_compile.label(r)}:", markup=False, highlight=False, style="bold")
            for sentence in r.explanation:
                con.print(f"  - {sentence}", markup=False, highlight=False)
    for err, command in errors:  # a command stays one line however wide the terminal (soft wrap: copied whole)
        con.print(err, markup=False, highlight=False, soft_wrap=command)
    if report.interrupted:
        con.print("[yellow]interrupted: the table holds the modes that finished[/]")
    for text in (getattr(report, "doctor_check", None) or {}).get("disagreements") or []:  # last: bench vs doctor
        con.print(f"doctor vs bench: {text}", markup=False, highlight=False, style="yellow")


def breakdown_categories(rows) -> list[str]:
    """The categories any row's breakdown has, in the breakdown's order ([] without --explain)."""
    seen = {c for r in rows if getattr(r, "breakdown", None) for c in r.breakdown}
    return [c for c in (*CATEGORIES, HOST_IDLE) if c in seen]


def _inputs(shapes) -> str:
    """{"input_ids": [128]} -> "input_ids 128"; [3, 32, 32] -> "3x32x32" (per sample)."""
    def one(s):
        return "x".join(map(str, s)) if isinstance(s, (list, tuple)) else str(s)

    if isinstance(shapes, dict):
        return ", ".join(f"{k} {one(v)}" for k, v in shapes.items())
    return one(shapes)


def to_csv(report, path: str) -> None:
    write_csv([r.csv_row() for r in report.results], path, CSV_COLUMNS)


# ---------------------------------------------------------------- the report's page
@dataclass
class BenchView(PageView):
    """A bench document on the report's page."""

    workload: str
    device: str
    has_ci: bool
    has_max_batch: bool
    note: str | None


def page_view(report, doc=None) -> BenchView:
    rows = [_page_row(r) for r in report.results]
    return BenchView(doc, rows, str(report.workload), str(report.device), has_ci=any(r["speedup_ci"] for r in rows),
                     has_max_batch=any(r["max_batch_size"] is not None for r in rows),
                     note=report.note if isinstance(report.note, str) else None)


def _page_row(r) -> dict:
    ci = [finite(x) for x in r.speedup_ci] if isinstance(r.speedup_ci, list) and len(r.speedup_ci) == 2 else None
    step = r.step_ms if isinstance(r.step_ms, dict) else {}
    flags = [f for f in r.flags if isinstance(f, str)] if isinstance(r.flags, list) else []
    row = {"mode": bench_compile.label(r), "status": r.status, "error": r.error, "resolved_from": r.resolved_from,
           "batch_size": r.batch_size, "samples_per_s": finite(r.samples_per_s), "p50": finite(step.get("p50")),
           "p90": finite(step.get("p90")), "peak_memory_bytes": finite(r.peak_memory_bytes),
           "max_batch_size": r.max_batch_size, "speedup": finite(r.speedup_vs_fp32),
           "speedup_ci": ci if ci and None not in ci else None, "repeats": r.repeats,
           "memory_saving": finite(r.memory_saving_vs_fp32), "skipped_steps": r.skipped_steps,
           "final_loss": finite(r.final_loss), "warmup_skipped_steps": r.warmup_skipped_steps, "flags": flags,
           "warning": r.warning if isinstance(r.warning, str) else None, "tflops": finite(r.tflops),
           "mfu": finite(r.mfu),
           "breakdown": r.breakdown if isinstance(r.breakdown, dict) else None,
           "explanation": [x for x in r.explanation if isinstance(x, str)] if isinstance(r.explanation, list) else []}
    row["speedup_verdict"] = _speedup_verdict(r.speedup_verdict, row)
    row["memory_words"] = "baseline" if r.mode == "fp32" else fmt_memory_ratio(row["memory_saving"], "×")
    row["emulated"] = r.emulated is True
    row["status_words"] = (r.status + ", " + ", ".join(FLAG_WORDS.get(f, f) for f in flags)
                           if r.status == "ok" and flags else r.status)
    if r.status == "ok" and row["emulated"]:  # fp8 without fp8 hardware: never a bare "ok" (issue #49)
        row["status_words"] += ", emulated"
    return row


def _speedup_verdict(word, row: dict) -> str | None:
    """The row's own words when it has them (bench writes ``speedup_verdict``), else read from its
    interval by bench's rule; a speedup without an interval (an older one-run document) has no
    verdict: one run cannot tell a difference from noise."""

    if row["mode"] == "fp32":
        return "baseline"
    if word in (FASTER, SLOWER, SAME, SMALL, "baseline"):
        return word
    if row["speedup"] is None or not row["speedup_ci"]:
        return None
    return classify(Estimate(row["speedup"], *row["speedup_ci"], 2), THRESHOLD)


def verdicts(view: BenchView) -> list[dict]:
    """The page's verdict rows: a mode's speedup is green or red only when its interval clears the threshold."""
    out = []
    for r in view.rows:
        if (r["mode"] == "fp32" or r["speedup_verdict"] == "baseline") and r["status"] == "ok":  # compiled fp32 too
            continue
        if r["status"] != "ok":
            text, t = r["status"], tone(r["status"])
        elif r["flags"]:  # the bench withheld the speedup: say why, in red
            text, t = f"{r['status_words']}: no speedup claimed", "bad"
        elif r["emulated"]:  # its time is the emulation's: no speedup is said
            text, t = "ok, emulated (no fp8 hardware here): no speedup claimed", "neutral"
        elif r["speedup"] is None:
            text, t = "ok", "neutral"
        else:
            text = f"{r['speedup']:.2f}× fp32"
            if r["speedup_ci"]:
                text += f" [{r['speedup_ci'][0]:.2f}, {r['speedup_ci'][1]:.2f}]"
            verdict = r["speedup_verdict"]
            if verdict in ("no measurable difference", "small difference"):
                text += f": {verdict}"
            elif verdict is None:
                text += ": one run, no interval"
            t = "good" if verdict == "faster" else "bad" if verdict == "slower" else "neutral"
        out.append({"key": f"bench {view.workload}: {r['mode']}", "text": text, "tone": t})
    return out


def figure(view: BenchView):
    """Throughput, speedup vs fp32 (with its interval as a whisker) and peak memory per mode, and the
    largest batch that fits when the bench searched for it; None without rows."""
    rows = view.rows
    if not rows:
        return None
    panels = (["throughput", "speedup", "memory"] + (["max_batch"] if view.has_max_batch else [])
              + (["breakdown"] if any(r.get("breakdown") for r in rows) else []))
    fig, axes = charts.figure(2.6 * len(panels), 2.6, len(panels))
    for ax, panel in zip(axes, panels):
        if panel == "throughput":
            charts.bars(ax, rows, "samples_per_s", "throughput (samples/s)", lambda v: f"{v:,.0f}")
        elif panel == "memory":
            mib = [dict(r, peak_mib=r["peak_memory_bytes"] / 2**20 if r["peak_memory_bytes"] is not None else None)
                   for r in rows]
            charts.bars(ax, mib, "peak_mib", "peak memory (MiB)", lambda v: f"{v:,.0f}")
        elif panel == "breakdown":
            _breakdown_panel(ax, rows)
        elif panel == "max_batch":
            mb = [dict(r, max_batch_size=r["max_batch_size"] if isinstance(r["max_batch_size"], (int, float)) else None)
                  for r in rows]
            charts.bars(ax, mb, "max_batch_size", "max batch size", lambda v: f"{v:,.0f}")
        else:
            _speedup_panel(ax, rows)
    return fig


def _speedup_panel(ax, rows: list[dict]) -> None:
    tops = {i: r["speedup_ci"][1] for i, r in enumerate(rows)
            if r["status"] == "ok" and r["speedup_ci"] and r["speedup"] is not None}
    charts.bars(ax, rows, "speedup", "speedup vs fp32 (×)", lambda v: f"{v:.2f}×", label_y=tops)
    for i, hi in tops.items():
        r = rows[i]
        lo = r["speedup_ci"][0]
        ax.errorbar([i], [r["speedup"]], yerr=[[max(0.0, r["speedup"] - lo)], [max(0.0, hi - r["speedup"])]],
                    fmt="none", ecolor="black", capsize=4, lw=1)
        ax.set_ylim(0, max(ax.get_ylim()[1], hi * 1.18))
    ax.axhline(1.0, color="black", lw=0.8, ls="--")


#: one colour per breakdown category (the stacked bars of --explain)
CATEGORY_COLORS = {"matmul_conv": "#1f77b4", "elementwise_norm": "#2ca02c", "casts": "#d62728", "optimizer": "#9467bd",
                   "loss_scaling": "#ff7f0e", "other": "#7f7f7f", "host_idle": "#bcbd22"}


def _breakdown_panel(ax, rows: list[dict]) -> None:
    """--explain: a stacked bar per mode, its median step in ms split by category."""
    names = [r["mode"] for r in rows]
    bottom = [0.0] * len(rows)
    for cat, colour in CATEGORY_COLORS.items():
        heights = [(r["breakdown"] or {}).get(cat, 0.0) * (r["p50"] or 0.0) if r.get("breakdown") else 0.0
                   for r in rows]
        if any(heights):
            ax.bar(names, heights, bottom=bottom, color=colour, label=cat)
            bottom = [b + h for b, h in zip(bottom, heights)]
    charts.slant(ax, names)
    ax.set_title("step by category (ms)")
    ax.legend(fontsize=6, loc="upper left", frameon=False)
    ax.set_ylim(0, max(bottom or [1.0]) * 1.6 or 1.0)


def plot(report, path: str) -> None:
    """``--plot``: the chart of :func:`figure` with a title, to ``path`` (PNG, PDF, SVG ... by extension)."""
    title = f"ampkit bench — {report.workload} ({report.framework}) on {report.device}"
    charts.plot(figure, page_view(report), title, path)

# ---------------------------------------------------------------- the notebook and to_pandas()
sections, headline = one_section("bench")  # a notebook cell's (command, report, part); no line of its own


def _cell(r: dict) -> str:
    if r["status"] != "ok":
        return f"{r['mode']} {r['status']}"
    if r["mode"] == "fp32" or r["speedup_verdict"] == "baseline":
        return f"{r['mode']} baseline"
    if r["flags"]:
        return f"{r['mode']} no speedup claimed"
    if r.get("emulated"):
        return f"{r['mode']} ok, emulated"
    if r["speedup"] is None:
        return f"{r['mode']} ok"
    return f"{r['mode']} {r['speedup']:.2f}× {r['speedup_verdict'] or 'one run, no interval'}"


def line(view: BenchView) -> str:
    """The ``repr``'s words: command, subject, each mode's verdict."""
    return f"bench {view.workload} on {view.device}: " + (", ".join(_cell(r) for r in view.rows) or NONE_FINISHED)


def rows(result, per: str | None = None) -> list[dict]:
    """``to_pandas()``: one row per mode, the contract's keys first (``step_ms_p50``, ``speedup_ci_low`` beside them)."""
    check_per(per)
    doc = result.to_dict()
    out = []
    for r in doc["results"]:
        row = {"workload": doc.get("workload"), **head(doc), **r}
        flat("step_ms", r.get("step_ms"), row)
        pair("speedup_ci", r.get("speedup_ci"), row)
        out.append(row)
    return out
