"""Rendering of bench reports: rich table, CSV and a PNG plot."""

from __future__ import annotations

from rich.table import Table

from ..bench.report import CSV_COLUMNS
from .output import fmt, fmt_bytes, fmt_memory_ratio, mode_color, print_keras_line, write_csv

_STATUS_STYLE = {"ok": "green", "unsupported": "dim", "oom": "yellow", "error": "bold red"}
_FLAG_WORDS = {"diverged": "loss diverged", "all_timed_steps_skipped": "all steps skipped"}
_VERDICT_STYLE = {"faster": "green", "slower": "red", "baseline": "dim"}


def _status(r) -> str:
    if r.status == "ok" and r.flags:
        return "[bold yellow]ok, " + ", ".join(_FLAG_WORDS.get(f, f) for f in r.flags) + "[/]"
    return f"[{_STATUS_STYLE.get(r.status, '')}]{r.status}[/]"


def _speedup(r) -> str:
    if r.speedup_vs_fp32 is not None:
        return fmt(r.speedup_vs_fp32, ".2f") + "x"
    return "none claimed" if r.flags else "—"


def _verdict(r) -> str:
    from ..bench.judge import describe

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
    from ..bench.judge import THRESHOLD

    repeats = (report.config.get("repeats") or 1) > 1
    how = ("95% interval: bootstrap over the repeats, each resampled together with fp32's run of the same repeat."
           if repeats else
           "95% interval: bootstrap over this run's timed steps (step-to-step noise only; --repeats N adds what "
           "changes between runs).")
    return [f"speedup = samples/s ÷ fp32's samples/s = fp32's median step time ÷ this mode's "
            f"(samples/s = batch ÷ step ms p50{', medians over the repeats' if repeats else ''}).",
            how,
            f"vs fp32: faster/slower only when the interval's end clears {THRESHOLD:.2f}x (the doctor's rule); "
            "no measurable difference when the interval holds 1."]


def render(report, con) -> None:
    if report.note:
        con.print(f"[bold]{report.note}[/]")
    flops = f"  ·  {report.flops_per_sample / 1e9:.3g} GFLOP/sample (fwd+bwd)" if report.flops_per_sample else ""
    world = f"  ·  world size {report.world_size}" if report.world_size > 1 else ""
    cfg = report.config
    repeats = f", {cfg['repeats']} interleaved repeats (medians)" if (cfg.get("repeats") or 1) > 1 else ", one run"
    inputs = f"  ·  inputs {_inputs(report.sample_inputs)}" if getattr(report, "sample_inputs", None) else ""
    # the title as lines of their own: a table's title folds to the table's (narrow) width
    title = (f"ampkit bench — {report.workload} ({report.framework}) on {report.device}{world}{flops}{inputs}  ·  "
             f"{cfg.get('steps')} timed steps after {cfg.get('warmup')} warm-up{repeats}")
    table = Table()
    table.add_column("", no_wrap=True)
    for r in report.results:
        table.add_column(r.mode, no_wrap=True, justify="right")
    res = report.results

    def line(label, cell):
        table.add_row(label, *[cell(r) if r.status == "ok" else "—" for r in res])

    table.add_row("status", *[_status(r) for r in res])
    line("batch size", lambda r: fmt(r.batch_size, "d"))
    line("samples/s", lambda r: fmt(r.samples_per_s, ",.1f"))
    line("step ms p50", lambda r: fmt(r.step_ms.get("p50"), ".2f"))
    line("step ms p90", lambda r: fmt(r.step_ms.get("p90"), ".2f"))
    line("speedup vs fp32", _speedup)
    line("95% interval", lambda r: f"{r.speedup_ci[0]:.2f}-{r.speedup_ci[1]:.2f}x" if r.speedup_ci and r.mode != "fp32"
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
    errors = [f"  {r.mode}: {r.error}" for r in res if r.error]
    print_keras_line(report, con)
    con.print(title, markup=False, highlight=False, style="bold")
    con.print(table)
    if any(r.status == "ok" and r.mode != "fp32" for r in res):
        for text in caption(report):
            con.print(text, markup=False, highlight=False, style="dim")
    for r in res:
        if r.resolved_from:
            con.print(f"{r.mode} ran for {r.resolved_from}: {r.resolved_reason}", markup=False, highlight=False)
    for r in res:
        if r.status == "ok" and r.flags:
            con.print(f"  {r.mode}: flagged, no speedup claimed: {r.warning}", markup=False, highlight=False,
                      style="yellow")
    for r in res:
        if r.status == "ok" and not r.flags and r.mode != "fp32" and r.speedup_verdict in ("no measurable difference",):
            con.print(f"  {r.mode}: no measurable difference from fp32 (interval "
                      f"{r.speedup_ci[0]:.2f}-{r.speedup_ci[1]:.2f}x holds 1)", markup=False, highlight=False)
    for err in errors:
        con.print(err, markup=False, highlight=False)
    if report.interrupted:
        con.print("[yellow]interrupted: the table holds the modes that finished[/]")


def _inputs(shapes) -> str:
    """{"input_ids": [128]} -> "input_ids 128"; [3, 32, 32] -> "3x32x32" (per sample)."""
    def one(s):
        return "x".join(map(str, s)) if isinstance(s, (list, tuple)) else str(s)

    if isinstance(shapes, dict):
        return ", ".join(f"{k} {one(v)}" for k, v in shapes.items())
    return one(shapes)


def to_csv(report, path: str) -> None:
    write_csv([r.csv_row() for r in report.results], path, CSV_COLUMNS)


def plot(report, path: str) -> None:
    """PNG: throughput and peak memory per mode, speedup and memory saving labelled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report.results if r.status == "ok"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    modes = [r.mode for r in rows]
    colors = [mode_color(m) for m in modes] or None
    bars = ax1.bar(modes, [r.samples_per_s for r in rows], color=colors)
    for b, r in zip(bars, rows):
        label = (f"{r.speedup_vs_fp32:.2f}x" if r.speedup_vs_fp32 is not None
                 else "no speedup: " + ", ".join(r.flags) if r.flags else "")
        ax1.annotate(label, (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom")
    ax1.set_title("throughput (samples/s)")
    bars = ax2.bar(modes, [(r.peak_memory_bytes or 0) / 2**20 for r in rows], color=colors)
    for b, r in zip(bars, rows):
        label = fmt_memory_ratio(r.memory_saving_vs_fp32) if r.memory_saving_vs_fp32 and r.mode != "fp32" else ""
        ax2.annotate(label, (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom")
    ax2.set_title("peak memory (MiB)")
    for r in report.results:
        if r.status != "ok":
            ax1.annotate(f"{r.mode}: {r.status}", xy=(0.01, 0.95 - 0.06 * report.results.index(r)),
                         xycoords="axes fraction", fontsize=8, color="gray")
    fig.suptitle(f"ampkit bench — {report.workload} on {report.device}")
    fig.tight_layout()
    from ..outputs import atomic_path, plot_format

    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=100, format=plot_format(path))
    finally:
        plt.close(fig)
