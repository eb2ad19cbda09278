"""Rendering of parity reports: rich table and a PNG of loss curves."""

from __future__ import annotations

from rich.table import Table

from .output import fmt, mode_color, print_keras_line

_STYLE = {"baseline": "cyan", "pass": "green", "fail": "bold red"}


def render(report, con) -> None:
    if getattr(report, "note", None):
        con.print(f"--modes auto: {report.note}", markup=False, highlight=False)
    r0 = report.results[0] if report.results else None
    n = len(r0.seeds) if r0 else 0
    table = Table(title=f"ampkit parity — {report.dataset} ({report.framework}) on {report.device}  ·  {n} seeds x {report.epochs} epochs"
                        f"  ·  tolerance {report.tolerance:g} accuracy, alpha {report.alpha:g}", title_justify="left")
    for c in ("mode", "accuracy ± std", "train loss ± std", "Δ acc", "p-value", "skipped", "verdict"):
        table.add_column(c, no_wrap=True, justify="left" if c in ("mode", "verdict") else "right")
    for r in report.results:
        style = _STYLE.get(r.verdict, "")
        table.add_row(r.mode, f"{r.metric['mean']:.4f} ± {r.metric['std']:.4f}",
                      f"{r.final_loss['mean']:.4f} ± {r.final_loss['std']:.4f}",
                      fmt(r.delta_vs_fp32, "+.4f"), fmt(r.p_value, ".3g"), str(r.skipped_steps),
                      f"[{style}]{r.verdict}[/]")
    print_keras_line(report, con)
    con.print(table)
    for r in report.results:
        if r.verdict != "baseline":
            con.print(f"  {r.mode}: {r.reason}", markup=False, highlight=False)
    if report.elapsed_s is not None:
        con.print(f"[dim]parity took {report.elapsed_s:.1f} s[/]")


def plot(report, path: str) -> None:
    """PNG: training loss per epoch, mean over seeds with a min-max band, final accuracies labelled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in report.results:
        curves = np.array([run.train_loss for run in r.runs], dtype=float)
        epochs = np.arange(1, curves.shape[1] + 1)
        mean = curves.mean(0)
        color = mode_color(r.mode)
        ax.plot(epochs, mean, label=f"{r.mode}: acc {r.metric['mean']:.3f} ± {r.metric['std']:.3f} ({r.verdict})",
                color=color)
        ax.fill_between(epochs, curves.min(0), curves.max(0), alpha=0.2, color=color)
    ax.set_xlabel("epoch")
    ax.set_ylabel("training loss (mean over seeds, band: min-max)")
    ax.set_yscale("log")
    ax.set_title(f"ampkit parity — {report.dataset} on {report.device}")
    ax.legend()
    fig.tight_layout()
    from ..outputs import atomic_path, plot_format

    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=100, format=plot_format(path))
    finally:
        plt.close(fig)
