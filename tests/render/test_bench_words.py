"""Issue 20: the bench table's words -- memory as less/more, one colour per mode everywhere."""

from __future__ import annotations

import io

from ampkit.bench.report import BenchReport, BenchRow, derive_relative
from ampkit.render.output import MODE_COLORS, fmt_memory_ratio, mode_color


def test_memory_ratio_in_words():
    assert fmt_memory_ratio(1.3) == "1.30x less"          # fp32 needs 1.3x this mode's peak
    assert fmt_memory_ratio(1 / 1.1) == "1.10x more"      # the user's "memory saving 0.88x"
    assert fmt_memory_ratio(0.88) == "1.14x more"
    assert fmt_memory_ratio(1.001) == "same as fp32"
    assert fmt_memory_ratio(None) == "—" and fmt_memory_ratio(float("nan")) == "—"


def _report() -> BenchReport:
    rows = [BenchRow("fp32", batch_size=8, samples_per_s=100.0, step_ms={"p50": 80.0, "p90": 90.0},
                     peak_memory_bytes=1000, final_loss=1.0, steps=3, warmup=1),
            BenchRow("bf16", batch_size=8, samples_per_s=110.0, step_ms={"p50": 72.7, "p90": 80.0},
                     peak_memory_bytes=500, final_loss=1.0, steps=3, warmup=1),
            BenchRow("fp16", batch_size=8, samples_per_s=90.0, step_ms={"p50": 88.9, "p90": 95.0},
                     peak_memory_bytes=1250, final_loss=1.0, steps=3, warmup=1, warmup_skipped_steps=1)]
    derive_relative(rows)
    return BenchReport(workload="mlp", device="cpu", results=rows, environment={"framework": "torch"},
                       config={"steps": 3, "warmup": 1, "repeats": 1})


def test_table_says_less_and_more_and_counts_warmup_skips():
    from rich.console import Console

    from ampkit.render import bench as render_bench

    buf = io.StringIO()
    render_bench.render(_report(), Console(file=buf, width=200, color_system=None))
    text = buf.getvalue()
    assert "memory vs fp32" in text and "2.00x less" in text and "1.25x more" in text
    assert "memory saving" not in text
    assert "skipped in warm-up" in text and "1 of 1" in text
    # no step times in the rows: no interval, and the table does not pretend there is one
    assert "no interval" in text


def test_one_colour_table_for_every_chart():
    from ampkit.render import charts

    assert charts.MODE_COLORS is MODE_COLORS
    assert all(charts.color(m) == mode_color(m) for m in ("fp32", "tf32", "fp16", "bf16", "fp8", "other"))
    assert len(set(MODE_COLORS.values())) == len(MODE_COLORS) and charts.BAD not in MODE_COLORS.values()


def test_bench_plot_uses_the_shared_colours(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ampkit.render import bench as render_bench

    seen = []
    real = plt.Axes.bar

    def spy(self, x, height, *args, color=None, **kw):
        seen.append(list(color or []))
        return real(self, x, height, *args, color=color, **kw)

    monkeypatch.setattr(plt.Axes, "bar", spy)
    render_bench.plot(_report(), str(tmp_path / "b.png"))
    assert seen and all(c == [MODE_COLORS[m] for m in ("fp32", "bf16", "fp16")] for c in seen)


def test_an_emulated_fp8_row_says_emulated_everywhere_never_a_bare_ok():
    """Issue #49: the report's verdict row of an emulated fp8 run read just "ok"."""
    from rich.console import Console

    from ampkit.render import PRESENTERS
    from ampkit.render import bench as render_bench
    from ampkit.render.notebook import line

    fp32 = BenchRow("fp32", batch_size=8, samples_per_s=100.0, step_ms={"p50": 80.0, "p90": 90.0},
                    peak_memory_bytes=1000, final_loss=1.0, steps=3, warmup=1)
    fp8 = BenchRow("fp8", batch_size=8, samples_per_s=60.0, step_ms={"p50": 130.0, "p90": 140.0},
                   peak_memory_bytes=800, final_loss=1.0, steps=3, warmup=1, emulated=True)
    derive_relative([fp32, fp8])
    report = BenchReport(workload="mlp", device="cpu", results=[fp32, fp8], environment={"framework": "torch"},
                         config={"steps": 3, "warmup": 1, "repeats": 1})
    from ampkit.render.output import Document

    view = PRESENTERS["bench"].page_view(report, Document("bench.json", "bench", report, "0"))
    (row,) = [r for r in render_bench.verdicts(view) if "fp8" in r["key"]]
    assert row["text"] == "ok, emulated (no fp8 hardware here): no speedup claimed"
    assert [r["status_words"] for r in view.rows] == ["ok", "ok, emulated"]
    buf = io.StringIO()
    render_bench.render(report, Console(file=buf, width=200, color_system=None))
    status = next(ln for ln in buf.getvalue().splitlines() if "status" in ln)
    assert "ok, emulated" in status
    assert "fp8 ok, emulated" in line(report)
    from ampkit.render.jinja import environment

    cell = environment(True).from_string('{% from "_sections.html.j2" import bench_section %}{{ bench_section(v, page=False) }}')
    assert '<span class="v v-flagged">ok, emulated</span>' in cell.render(v=view)  # the page's status cell


def test_a_mode_hundreds_of_times_slower_never_reads_zero():
    """An emulated fp16 matmul measured 0.0039x fp32 read "0.00x [0.00, 0.00]" in the doctor's table
    and reason: two significant digits below 0.1, two decimals elsewhere (every figure above unchanged)."""
    from rich.console import Console

    from ampkit.doctor.verdicts import recommend
    from ampkit.render import bench as render_bench
    from ampkit.stats import Estimate, ratio_text

    assert [ratio_text(v) for v in (0.0039, 0.087, 0.1, 1.234, 12.5)] == ["0.0039", "0.087", "0.10", "1.23", "12.50"]
    assert Estimate(0.0039, 0.0036, 0.0042, 2).words() == "0.0039x [0.0036, 0.0042]"
    rep = _report()
    rep.results[2].speedup_vs_fp32, rep.results[2].speedup_ci = 0.0039, [0.0036, 0.0042]
    buf = io.StringIO()
    render_bench.render(rep, Console(file=buf, width=200, color_system=None))
    assert "0.0039x" in buf.getvalue() and "0.0036-0.0042x" in buf.getvalue() and "0.00x" not in buf.getvalue()
    from ampkit.doctor.report import ModeReport

    reports = {"fp32": ModeReport(True, speedup=1.0, selftest="pass", verdict="usable"),
               "fp16": ModeReport(True, False, 0.0039, [0.0036, 0.0042], selftest="pass", verdict="slower")}
    mode, why = recommend(reports, quick=False)
    assert mode == "fp32" and "fp16 0.0039x [0.0036, 0.0042]" in why and "0.00x" not in why
