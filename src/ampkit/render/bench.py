"""Rendering of bench reports: rich table, CSV and a PNG plot."""

from __future__ import annotations

from rich.table import Table

from ..bench.report import CSV_COLUMNS
from .output import fmt, fmt_bytes, print_keras_line, write_csv

_STATUS_STYLE = {"ok": "green", "unsupported": "dim", "oom": "yellow", "error": "bold red"}


def render(report, con) -> None:
    if report.note:
        con.print(f"[bold]{report.note}[/]")
    flops = f"  ·  {report.flops_per_sample / 1e9:.3g} GFLOP/sample (fwd+bwd)" if report.flops_per_sample else ""
    world = f"  ·  world size {report.world_size}" if report.world_size > 1 else ""
    cfg = report.config
    repeats = f", {cfg['repeats']} interleaved repeats (medians)" if (cfg.get("repeats") or 1) > 1 else ""
    table = Table(title=f"ampkit bench — {report.workload} ({report.framework}) on {report.device}{world}{flops}  ·  "
                        f"{cfg.get('steps')} timed steps after {cfg.get('warmup')} warm-up{repeats}",
                  title_justify="left")
    table.add_column("", no_wrap=True)
    for r in report.results:
        table.add_column(r.mode, no_wrap=True, justify="right")
    res = report.results

    def line(label, cell):
        table.add_row(label, *[cell(r) if r.status == "ok" else "—" for r in res])

    table.add_row("status", *[f"[{_STATUS_STYLE.get(r.status, '')}]{r.status}[/]" for r in res])
    line("batch size", lambda r: fmt(r.batch_size, "d"))
    line("samples/s", lambda r: fmt(r.samples_per_s, ",.1f"))
    line("step ms p50", lambda r: fmt(r.step_ms.get("p50"), ".2f"))
    line("step ms p90", lambda r: fmt(r.step_ms.get("p90"), ".2f"))
    line("peak memory", lambda r: fmt_bytes(r.peak_memory_bytes))
    if any(r.max_batch_size for r in res):
        line("max batch size", lambda r: fmt(r.max_batch_size, "d"))
    line("speedup vs fp32", lambda r: (fmt(r.speedup_vs_fp32, ".2f") + "x") if r.speedup_vs_fp32 is not None else "—")
    if any(r.speedup_ci for r in res):
        line("95% interval", lambda r: f"{r.speedup_ci[0]:.2f}-{r.speedup_ci[1]:.2f}x" if r.speedup_ci else "—")
    line("memory saving", lambda r: (fmt(r.memory_saving_vs_fp32, ".2f") + "x") if r.memory_saving_vs_fp32 else "—")
    line("skipped steps", lambda r: str(r.skipped_steps))
    line("final loss", lambda r: fmt(r.final_loss, ".4g"))
    line("TFLOP/s", lambda r: fmt(r.tflops, ".3g"))
    line("MFU", lambda r: (fmt(r.mfu * 100, ".1f") + "%") if r.mfu is not None else "—")
    errors = [f"  {r.mode}: {r.error}" for r in res if r.error]
    print_keras_line(report, con)
    con.print(table)
    for r in res:
        if r.resolved_from:
            con.print(f"{r.mode} ran for {r.resolved_from}: {r.resolved_reason}", markup=False, highlight=False)
    for err in errors:
        con.print(err, markup=False, highlight=False)
    if report.interrupted:
        con.print("[yellow]interrupted: the table holds the modes that finished[/]")


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
    palette = {"fp32": "#4c72b0", "tf32": "#8172b2", "fp16": "#55a868", "bf16": "#c44e52"}
    colors = [palette.get(m, "#888888") for m in modes] or None
    bars = ax1.bar(modes, [r.samples_per_s for r in rows], color=colors)
    for b, r in zip(bars, rows):
        label = f"{r.speedup_vs_fp32:.2f}x" if r.speedup_vs_fp32 is not None else ""
        ax1.annotate(label, (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom")
    ax1.set_title("throughput (samples/s)")
    bars = ax2.bar(modes, [(r.peak_memory_bytes or 0) / 2**20 for r in rows], color=colors)
    for b, r in zip(bars, rows):
        label = f"{1 / r.memory_saving_vs_fp32:.2f}x fp32" if r.memory_saving_vs_fp32 else ""
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
