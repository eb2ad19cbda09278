"""How a parity report is shown: the console table, the chart (``--plot`` and the report's page),
and the report page's rows and verdicts."""

from __future__ import annotations

from dataclasses import dataclass

from rich.markup import escape
from rich.table import Table

from ..words import signed
from . import charts
from .output import NONE_FINISHED, PageView, check_per, csv_of, finite, flat, fmt, head, one_section, print_keras_line, verdict_row

_STYLE = {"baseline": "cyan", "pass": "green", "fail": "bold red", "inconclusive": "yellow",
          "equivalent": "green", "not_equivalent": "bold red", "not_measured": "dim"}
#: the verdicts in words (the table, the report page)
WORDS = {"pass": "pass", "fail": "fail: worse", "inconclusive": "inconclusive: not proven",
         "baseline": "baseline", "equivalent": "equivalent", "not_equivalent": "not equivalent",
         "not_measured": "not measured"}


def equivalence_cell(eq) -> str:
    """``equivalent [-0.004, +0.006]``, ``inconclusive (~12 seeds)``, ``—`` for the baseline."""
    if not isinstance(eq, dict) or not eq.get("verdict"):
        return "—"
    word = str(eq["verdict"]).replace("_", " ")
    ci = eq.get("ci")
    ci = f" [{signed(ci[0])}, {signed(ci[1])}]" if isinstance(ci, list) and len(ci) == 2 and None not in ci else ""
    need = f" (~{eq['seeds_needed']} seeds)" if eq.get("seeds_needed") else ""
    return word + ci + need


def _styled(text: str, style: str) -> str:
    return f"[{style}]{escape(text)}[/]" if style else escape(text)


def _p_cell(r) -> str:
    eq = r.equivalence if isinstance(r.equivalence, dict) else {}
    if r.p_value is None and eq.get("degenerate"):
        return f"n/a ({eq['degenerate']})"
    return fmt(r.p_value, ".3g")


def _grid_words(report) -> str:
    """``  ·  partial: shard 2/3`` / ``  ·  2 processes`` (torchrun) in the title."""
    if getattr(report, "shard", None):
        return f"  ·  partial: shard {report.shard}"
    world = getattr(report, "world_size", None)
    return f"  ·  {world} processes" if world and world > 1 else ""


def render(report, con) -> None:
    if getattr(report, "baseline_not_learned", None):  # first: every verdict below rests on it (issue #46)
        con.print(f"[yellow]inconclusive:[/] {escape(report.baseline_not_learned)}", highlight=False)
    if getattr(report, "note", None):
        prefix = "--modes auto: " if report.note.startswith("auto ") else "note: "  # else: fp8 emulated here
        con.print(f"{prefix}{report.note}", markup=False, highlight=False)
    r0 = report.results[0] if report.results else None
    n = len(r0.seeds) if r0 else 0
    grid = getattr(report, "grid", None)
    if getattr(report, "shard", None) and isinstance(grid, dict) and isinstance(grid.get("seeds"), list):
        n = len(grid["seeds"])  # a share of the grid: the grid's seeds, not the few this part holds
    metric = getattr(report, "metric", None) or "accuracy"
    length = f"{report.steps} steps" if getattr(report, "steps", None) else f"{report.epochs} epochs"
    margin = report.margin if getattr(report, "margin", None) is not None else report.tolerance
    table = Table(title=escape(f"ampkit parity — {report.dataset} ({report.framework}) on {report.device}  ·  {n} seeds x "
                               f"{length}  ·  tolerance {report.tolerance:g} {metric}, margin ±{margin:g}, "
                               f"alpha {report.alpha:g}{_grid_words(report)}"), title_justify="left")
    for c in ("mode", f"{metric} ± std", "train loss ± std", "Δ vs fp32", "p-value", "skipped", "verdict",
              "equivalence"):
        table.add_column(c, no_wrap=True, justify="left" if c in ("mode", "verdict", "equivalence") else "right")
    for r in report.results:
        style = _STYLE.get(r.verdict, "")
        eq = r.equivalence if isinstance(r.equivalence, dict) else {}
        table.add_row(r.mode, f"{r.metric['mean']:.4f} ± {r.metric['std']:.4f}",
                      f"{r.final_loss['mean']:.4f} ± {r.final_loss['std']:.4f}",
                      signed(r.delta_vs_fp32) if r.delta_vs_fp32 is not None else "—", _p_cell(r), str(r.skipped_steps),
                      _styled("— (partial)", "") if getattr(report, "shard", None) and r.verdict != "baseline"
                      else _styled(WORDS.get(r.verdict, r.verdict), style),
                      _styled(equivalence_cell(eq), _STYLE.get(eq.get("verdict"), "")))
    print_keras_line(report, con)
    con.print(table)
    for r in report.results:
        if r.verdict != "baseline" or r.reason != "the reference":
            con.print(f"  {r.mode}: {r.reason}", markup=False, highlight=False)
        if isinstance(r.equivalence, dict) and r.equivalence.get("reason"):
            con.print(f"  {r.mode} equivalence: {r.equivalence['reason']}", markup=False, highlight=False)
    unpaired = getattr(report, "unpaired_runs", None) or []
    if unpaired:  # an interrupted seed's finished runs: kept, outside the statistics
        runs = ", ".join(f"{r.mode} seed {r.seed}" for r in unpaired[:6]) + (", ..." if len(unpaired) > 6 else "")
        con.print(f"  kept outside the statistics ({len(unpaired)} run(s) of a seed that did not finish every mode: "
                  f"{runs}); --resume runs only the rest", markup=False, highlight=False)
    if report.elapsed_s is not None:
        con.print(f"[dim]parity took {report.elapsed_s:.1f} s[/]")


# ---------------------------------------------------------------- the report's page
@dataclass
class ParityView(PageView):
    """A parity document on the report's page (with its curves)."""

    dataset: str
    device: str
    tolerance: float | None
    alpha: float | None
    epochs: int | None
    has_curves: bool
    baseline_not_learned: str | None = None  # the fp32 baseline did not learn: said before any verdict
    #: a ``parity --runs`` document: every run's training loss, [(mode, seed, losses)], drawn on one chart
    run_curves: list = None


def page_view(report, doc=None) -> ParityView:
    rows = []
    for r in report.results:
        metric = r.metric if isinstance(r.metric, dict) else {}
        loss = r.final_loss if isinstance(r.final_loss, dict) else {}
        rows.append({"mode": r.mode, "seeds": r.seeds if isinstance(r.seeds, list) else [],
                     "metric_name": metric.get("name", "metric"), "metric_mean": finite(metric.get("mean")),
                     "metric_std": finite(metric.get("std")), "loss_mean": finite(loss.get("mean")),
                     "loss_std": finite(loss.get("std")), "delta": finite(r.delta_vs_fp32),
                     "p_value": finite(r.p_value), "verdict": r.verdict, "reason": r.reason or "",
                     "verdict_words": WORDS.get(r.verdict, str(r.verdict)),
                     "equivalence": equivalence_cell(r.equivalence),
                     "equivalence_verdict": (r.equivalence or {}).get("verdict") if isinstance(r.equivalence, dict) else None,
                     "equivalence_reason": (r.equivalence or {}).get("reason", "") if isinstance(r.equivalence, dict) else "",
                     "skipped_steps": r.skipped_steps, "acc_curve": _curve(r.runs, "test_accuracy"),
                     "loss_curve": _curve(r.runs, "train_loss")})
    epochs = report.epochs if isinstance(report.epochs, int) and not isinstance(report.epochs, bool) else None
    shard = getattr(report, "shard", None)
    name = str(report.dataset) + (f" (partial: shard {shard})" if shard else "")
    run_curves = None
    if str(getattr(report, "note", "") or "").startswith("your runs:"):  # ampkit.parity.runs: the users' own runs
        run_curves = [(r.mode, run.seed, [finite(v) for v in run.train_loss]) for r in report.results for run in r.runs
                      if isinstance(run.train_loss, list) and len(run.train_loss) > 1]
    unlearned = getattr(report, "baseline_not_learned", None)
    return ParityView(doc, rows, name, str(report.device or "—"), finite(report.tolerance),
                      finite(report.alpha), epochs, any(r["acc_curve"] for r in rows) or bool(run_curves),
                      unlearned if isinstance(unlearned, str) else None, run_curves)


def _curve(runs: list, key: str) -> tuple[list[float], list[float]] | None:
    """Mean and std per epoch over seeds (runs of unequal length: the common prefix)."""
    series = [getattr(run, key) for run in runs]
    series = [[finite(v) for v in s] for s in series if isinstance(s, list)]
    series = [s for s in series if s and None not in s]
    if not series:
        return None
    n = min(len(s) for s in series)
    mean, std = [], []
    for i in range(n):
        vals = [s[i] for s in series]
        mu = sum(vals) / len(vals)
        mean.append(mu)
        std.append((sum((v - mu) ** 2 for v in vals) / (len(vals) - 1)) ** 0.5 if len(vals) > 1 else 0.0)
    return mean, std


def verdicts(view: ParityView) -> list[dict]:
    rows = []
    if view.baseline_not_learned:  # first: no mode's verdict means anything without it
        rows.append(verdict_row(f"parity {view.dataset}: fp32 baseline", "inconclusive", f": {view.baseline_not_learned}"))
    for r in view.rows:
        if r["verdict"] == "baseline":
            continue
        detail = f" (p={r['p_value']:.3g})" if r["p_value"] is not None else ""
        if "(partial: shard" in view.dataset:
            detail = " (a partial document: no verdict until the parts are merged)"
        if r["equivalence_verdict"]:
            detail += f"; {r['equivalence']}"
        rows.append(verdict_row(f"parity {view.dataset}: {r['mode']}", r["verdict"], detail))
    return rows


def figure(view: ParityView):
    """Test accuracy and train loss per epoch, mean over seeds with a ± std band; after a single
    epoch there is no curve, so each mode is a point with a ± std whisker. None without curves."""
    from matplotlib.ticker import MaxNLocator

    if not view.has_curves:
        return None
    if view.run_curves:
        return _runs_figure(view)
    fig, axes = charts.figure(8.0, 2.8, 2)
    epochs_n = min((len(r["acc_curve"][0]) for r in view.rows if r["acc_curve"]), default=0)
    for ax, key, title in ((axes[0], "acc_curve", "test accuracy"), (axes[1], "loss_curve", "train loss")):
        rows = [r for r in view.rows if r[key]]
        if epochs_n <= 1:
            for i, r in enumerate(rows):
                (mu,), (sd,) = r[key][0][:1], r[key][1][:1]
                ax.errorbar([i], [mu], yerr=[sd], fmt="o", color=charts.color(r["mode"]), capsize=5, ms=6)
            ax.set_xticks(range(len(rows)))
            ax.set_xticklabels([f"{r['mode']}\n({r['verdict']})" for r in rows])
            ax.set_xlim(-0.6, len(rows) - 0.4)
            ax.set_title(f"{title} after 1 epoch (mean ± std over seeds)")
            continue
        for r in rows:
            mean, std = r[key]
            xs = list(range(1, len(mean) + 1))
            c = charts.color(r["mode"])
            ax.plot(xs, mean, marker="o", ms=3, color=c, label=f"{r['mode']} ({r['verdict']})")
            ax.fill_between(xs, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)],
                            color=c, alpha=0.18, lw=0)
        ax.set_title(f"{title} (mean ± std over seeds)")
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if epochs_n > 1:
        axes[0].legend(fontsize=8, frameon=False)
    return fig


def plot(report, path: str) -> None:
    """``--plot``: the chart of :func:`figure` with a title, to ``path`` (PNG, PDF, SVG ... by extension)."""
    title = f"ampkit parity — {report.dataset} ({report.framework}) on {report.device}"
    charts.plot(figure, page_view(report), title, path)


def _runs_figure(view: ParityView):
    """``parity --runs``: every run's training loss on one chart (a line per run, a colour per mode),
    and each mode's final metric, mean ± std over its runs."""
    fig, axes = charts.figure(8.0, 2.8, 2)
    labelled = set()
    for mode, _seed, losses in view.run_curves:
        xs = [i + 1 for i, v in enumerate(losses) if v is not None]
        ys = [v for v in losses if v is not None]
        axes[0].plot(xs, ys, lw=1.2, alpha=0.85, color=charts.color(mode), label=None if mode in labelled else mode)
        labelled.add(mode)
    axes[0].set_title("training loss, every run (as logged)")
    axes[0].set_xlabel("logged step")
    axes[0].legend(fontsize=8, frameon=False)
    rows = [r for r in view.rows if r["metric_mean"] is not None]
    for i, r in enumerate(rows):
        axes[1].errorbar([i], [r["metric_mean"]], yerr=[r["metric_std"] or 0.0], fmt="o", color=charts.color(r["mode"]),
                         capsize=5, ms=6)
    axes[1].set_xticks(range(len(rows)))
    axes[1].set_xticklabels([f"{r['mode']}\n({r['verdict']})" for r in rows])
    axes[1].set_xlim(-0.6, len(rows) - 0.4)
    axes[1].set_title(f"{rows[0]['metric_name'] if rows else 'metric'} at the end (mean ± std over runs)")
    return fig

# ---------------------------------------------------------------- the notebook and to_pandas()
sections, headline = one_section("parity")


def line(view: ParityView) -> str:
    unlearned = "fp32 did not learn; " if view.baseline_not_learned else ""
    text = f"parity {view.dataset} on {view.device}: {unlearned}" + (", ".join(f"{r['mode']} {r['verdict']}" for r in view.rows)
                                                           or NONE_FINISHED)
    unpaired = getattr(getattr(view.doc, "report", None), "unpaired_runs", None)
    if unpaired:  # an unfinished seed's runs, kept for --resume
        text += f"; {len(unpaired)} unpaired run(s) kept"
    return text


def rows(result, per: str | None = None) -> list[dict]:
    """``to_pandas()``: one row per mode; ``per="seed"``: one per (mode, seed) run, an interrupted run's
    unpaired runs too (outside the statistics: ``paired`` tells them apart)."""
    check_per(per, ("seed",))
    doc = result.to_dict()
    if per == "seed":
        return [{"dataset": doc.get("dataset"), **head(doc), **run, **({"paired": not alone} if doc.get("unpaired_runs") else {})}
                for alone, runs in ((False, [x for p in doc["results"] for x in p.get("runs") or []]),
                                    (True, doc.get("unpaired_runs") or [])) for run in runs]
    out = []
    for p in doc["results"]:
        row = {"dataset": doc.get("dataset"), **head(doc), **{k: v for k, v in p.items() if k != "runs"}}
        flat("final_loss", p.get("final_loss"), row)
        flat("metric", p.get("metric"), row)
        flat("equivalence", p.get("equivalence"), row)
        out.append(row)
    return out


to_csv = csv_of(rows)
