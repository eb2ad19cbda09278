"""bench --compile: the config and the flag, the driver's ``both`` (eager rows, then compiled, with
speedup_vs_eager), and the torch row: compiled, compile_s outside the timed steps, dynamo's graph
breaks and recompiles, "compile unavailable" without a C++ compiler, a compile failure as the row's
error, and the table naming a graph break.

The torch rows compile with dynamo's ``aot_eager`` backend (dynamo and AOTAutograd, no C++ build:
the counters and the plumbing are the same; inductor's own compile costs ~20 s here and is
exercised by tests/backends/torch/test_engine_compile.py and the acceptance command
``ampkit bench --workload mlp --modes fp32,bf16 --compile both``)."""

from __future__ import annotations

import math

import pytest
import torch

from ampkit.bench.compiled import check_compile, compiled_warmup
from ampkit.bench.config import BenchConfig
from ampkit.bench.report import BenchRow, derive_relative
from ampkit.errors import UsageError

CPU = torch.device("cpu")


# ---------------------------------------------------------------- the flag
@pytest.mark.parametrize("value, expected", [("off", "off"), ("ON", "on"), (" both ", "both"), (True, "on"),
                                             (False, "off")])
def test_compile_values_normalise(value, expected):
    assert BenchConfig(compile=value).compile == expected


@pytest.mark.parametrize("value", ["yes", "", None, 1])
def test_a_bad_compile_value_is_one_usage_line(value):
    with pytest.raises(UsageError, match=r"--compile must be one of off, on, both; received"):
        check_compile(value)


def test_the_cli_refuses_a_bad_compile_value(capsys):
    from ampkit.cli.main import main

    try:
        code = main(["bench", "--compile", "maybe"])
    except SystemExit as exc:
        code = exc.code
    assert code == 2 and "--compile" in capsys.readouterr().err


@pytest.mark.parametrize("compile_", ["on", "both"])
def test_compile_with_logical_cpu_replicas_is_one_usage_line(compile_):
    # XLA under MirroredStrategy on logical CPU devices fails every mode ("Trying to access resource
    # dense/kernel/replica_1"): refused up front; a strategy over real devices may still compile.
    with pytest.raises(UsageError, match=r"^--compile on\|both cannot run with --replicas"):
        BenchConfig(strategy="mirrored", replicas=2, compile=compile_)
    assert BenchConfig(strategy="mirrored", compile=compile_).compile == compile_
    assert BenchConfig(strategy="mirrored", replicas=2).compile == "off"


def test_a_global_batch_smaller_than_the_replicas_is_refused():
    with pytest.raises(UsageError, match=r"--batch-size 1 is smaller than --replicas 2"):
        BenchConfig(strategy="mirrored", replicas=2, batch_size=1)
    assert BenchConfig(strategy="mirrored", replicas=2, batch_size=2).batch_size == 2


def test_the_cli_refuses_compile_with_replicas(capsys):
    from ampkit.cli.main import main

    try:
        code = main(["bench", "--framework", "tensorflow", "--strategy", "mirrored", "--replicas", "2",
                     "--compile", "on"])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and "--replicas" in err and "Traceback" not in err


def test_a_compiled_run_never_times_its_compiling_step():
    assert compiled_warmup(0, True) == 1 and compiled_warmup(5, True) == 5 and compiled_warmup(0, False) == 0


# ---------------------------------------------------------------- the driver's both
def test_both_runs_every_mode_eager_then_compiled_with_speedup_vs_eager():
    from compile_plain import CompilingPlain

    from ampkit.bench import driver

    report = driver.run(BenchConfig(workload="tiny", modes="fp32,bf16", steps=3, warmup=0, compile="both"),
                        CompilingPlain())
    rows = report.results
    assert [(r.mode, r.compiled) for r in rows] == [("fp32", False), ("bf16", False), ("fp32", True), ("bf16", True)]
    assert all(r.status == "ok" for r in rows)
    eager, compiled = rows[:2], rows[2:]
    assert all(r.speedup_vs_eager is None for r in eager)
    for e, c in zip(eager, compiled):
        assert c.speedup_vs_eager == pytest.approx(c.samples_per_s / e.samples_per_s)
    assert compiled[0].speedup_vs_fp32 == 1.0  # each group against its own fp32
    assert report.config["compile"] == "both"
    doc = report.to_dict()["results"]
    assert {"compiled", "compile_s", "graph_breaks", "recompiles"} <= set(doc[0])


# ---------------------------------------------------------------- the torch row
@pytest.fixture
def cheap_compile(monkeypatch):
    """torch.compile with aot_eager (no C++ build) in place of inductor, for these rows only."""
    import ampkit.backends.torch.compiled as compiled

    def compile_model(model):
        torch._dynamo.reset()
        return torch.compile(model, backend="aot_eager")

    monkeypatch.setattr(compiled, "compile_model", compile_model)
    return compiled


def _row(model: str, mode: str = "fp32", compile: str = "on", warmup: int = 0, explain: bool = False) -> BenchRow:
    from ampkit.bench.ops import MeasureRequest
    from ampkit.bench.session import measure_mode
    from ampkit.registry import get_backend

    backend = get_backend("torch")
    cfg = BenchConfig(model=model, input_shape=(8,), num_classes=4, modes=mode, steps=3, warmup=warmup, device="cpu",
                      batch_size=4, compile=compile, explain=explain)
    return measure_mode(backend, MeasureRequest(cfg, mode, backend.target("cpu")), None)


def _table(rows) -> str:
    from rich.console import Console

    from ampkit.bench.report import BenchReport
    from ampkit.render import bench as render_bench

    con = Console(record=True, width=200)
    render_bench.render(BenchReport("m", "cpu", rows, {}, config={"steps": 3, "warmup": 1}), con)
    return con.export_text()


def test_a_clean_model_compiles_without_breaks_and_its_compile_is_untimed(cheap_compile):
    eager = _row("compile_models:tiny", compile="off", warmup=1)
    row = _row("compile_models:tiny")
    assert row.status == "ok", row.error
    assert row.compiled is True and eager.compiled is False
    assert row.graph_breaks == 0 and row.recompiles == 0 and row.graph_break_reasons == []
    assert eager.graph_breaks is None and eager.compile_s is None
    assert row.warmup == 1 and len(row.step_times_ms) == 3  # --warmup 0: the compiling step still untimed
    assert row.compile_s > 0
    assert row.final_loss == pytest.approx(eager.final_loss, rel=1e-5)  # aot_eager: torch's own kernels
    text = _table([eager, row])
    assert "fp32 (compiled)" in text and "graph breaks" in text and "compile s" in text


def test_an_item_in_forward_is_a_graph_break_and_the_table_says_so(cheap_compile):
    row = _row("compile_models:breaks", mode="bf16", warmup=1)
    assert row.status == "ok", row.error
    assert row.graph_breaks >= 1 and "item" in row.graph_break_reasons[0].lower()
    text = _table([row])
    assert "graph breaks!" in text and "graph break(s) in the compiled model" in text


def test_a_model_dynamo_gives_up_on_is_no_silent_clean_compile(cheap_compile):
    """Dynamo skips a frame it cannot trace (no graph_break counter): the model ran eagerly, the row
    must not read 'compiled, 0 graph breaks'."""
    row = _row("compile_models:refuses", warmup=1)
    assert row.status == "ok", row.error
    assert row.graph_breaks >= 1
    assert "ran eagerly" in row.graph_break_reasons[-1] and "not while compiling" in row.graph_break_reasons[-1]
    assert "graph breaks!" in _table([row])


def test_explain_on_an_oversubscribed_cpu_does_not_recompile_the_compiled_model(cheap_compile, monkeypatch):
    """--compile on --explain with the load above the CPUs: eager rows are profiled on one thread, but the
    thread count is a dynamo guard -- switching it recompiled inside the profiled step (its time all
    'other', the row's recompiles 1 for a clean model)."""
    import os

    monkeypatch.setattr(os, "getloadavg", lambda: (1000.0, 1000.0, 1000.0))
    threads = torch.get_num_threads()
    row = _row("compile_models:tiny", warmup=1, explain=True)
    assert row.status == "ok", row.error
    assert row.recompiles == 0 and row.graph_breaks == 0
    assert "oversubscribed" in row.explain_detail["approximate"] and "every thread" in row.explain_detail["approximate"]
    assert torch.get_num_threads() == threads


@pytest.fixture
def no_working_compiler(monkeypatch):
    """What inductor itself searches ($CXX, else g++) made to fail: a $CXX that does not exist. The
    search's cache is cleared around the test (it is per process)."""
    import torch._inductor.config as inductor_config
    from torch._inductor.cpp_builder import cpp_compiler_search

    monkeypatch.setenv("CXX", "/nonexistent/g++")
    cpp_compiler_search.cache_clear()
    with inductor_config.patch({"cpp.cxx": (None, "/nonexistent/g++")}):  # torch's own patch (monkeypatch's undo breaks it)
        yield
    cpp_compiler_search.cache_clear()


def test_without_a_cpp_compiler_the_row_says_compile_unavailable(no_working_compiler):
    """issue #40: with c++ on the PATH but no compiler inductor uses, the rows were 'error CompileFailed'."""
    row = _row("compile_models:tiny")
    assert row.status == "unsupported" and row.compiled is True
    assert row.error.startswith("compile unavailable: inductor builds C++ kernels on a CPU and found no working C++ "
                                "compiler ($CXX='/nonexistent/g++' does not run)"), row.error


def test_a_compile_failure_is_the_rows_error_and_the_next_mode_runs(monkeypatch):
    import ampkit.backends.torch.compiled as compiled

    def broken(gm, example_inputs):
        raise RuntimeError("planted backend failure")

    monkeypatch.setattr(compiled, "compile_model", lambda m: torch.compile(m, backend=broken))
    bad = _row("compile_models:tiny")
    assert bad.status == "error" and bad.compiled
    assert bad.error == "CompileFailed: torch.compile failed (broken): RuntimeError: planted backend failure"
    good = _row("compile_models:tiny", mode="bf16", compile="off")
    assert good.status == "ok"
    derive_relative([bad, good])


def test_an_unsupported_mode_asked_compiled_is_marked_compiled():
    from ampkit.bench.compiled import run_variants

    def group(cfg):
        return [BenchRow("tf32", status="unsupported", error="no GPU")], False

    rows, interrupted = run_variants(BenchConfig(compile="both"), group)
    assert [r.compiled for r in rows] == [False, True] and not interrupted
    assert [r.compiled for r in run_variants(BenchConfig(compile="on"), group)[0]] == [True]


def test_the_report_page_names_compiled_rows_apart():
    from ampkit.render.bench import _page_row

    eager, compiled = BenchRow("bf16"), BenchRow("bf16", compiled=True)
    assert _page_row(eager)["mode"] == "bf16" and _page_row(compiled)["mode"] == "bf16 (compiled)"


def test_compiled_bar_labels_do_not_overlap_in_the_chart():
    """--compile both --plot (and the report's charts): 'fp32 (compiled)' and 'bf16 (compiled)' side
    by side were drawn over each other; the labels' drawn boxes must stay apart."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from ampkit.bench.report import BenchReport
    from ampkit.render import bench as render_bench
    from ampkit.render import charts

    rows = []
    for compiled in (False, True):
        for mode, p50 in (("fp32", 80.0), ("bf16", 60.0)):
            r = BenchRow(mode, batch_size=8, samples_per_s=8e3 / p50, step_ms={"p50": p50, "p90": p50}, compiled=compiled,
                         peak_memory_bytes=2**20, final_loss=1.0, first_loss=2.0, steps=3)
            r.breakdown = {"matmul_conv": 0.5, "other": 0.5}
            rows.append(r)
    derive_relative(rows[:2])
    derive_relative(rows[2:])
    fig = charts.draw(render_bench.figure, render_bench.page_view(BenchReport("m", "cpu", rows, {})))
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    for ax in fig.axes:
        labels = [t for t in ax.get_xticklabels() if t.get_text()]
        assert [t.get_text() for t in labels] == ["fp32", "bf16", "fp32 (compiled)", "bf16 (compiled)"]
        boxes = [t.get_window_extent(renderer) for t in labels]
        theta = math.radians(labels[0].get_rotation())
        for a, b, t in zip(boxes, boxes[1:], labels):
            if theta == 0:  # level labels: their boxes apart
                assert a.x1 <= b.x0, [x.get_text() for x in labels]
            else:  # slanted: parallel lines at least one text height apart
                height = t.get_fontsize() * fig.dpi / 72
                assert (b.x1 - a.x1) * math.sin(theta) >= height


@pytest.mark.slow
def test_a_compiled_run_leaves_no_warning_after_the_last_line(tmp_path):
    """issue #40: every --compile run ended with multiprocessing's 'leaked semaphore' warning (inductor's
    worker pool, left to the child's os._exit) after ampkit's last line."""
    import os
    import subprocess
    import sys

    from ampkit.backends.torch.compiled import compile_unavailable

    why = compile_unavailable(torch.device("cpu"))
    if why:
        pytest.skip(why)
    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run([sys.executable, "-m", "ampkit", "bench", "--model", "compile_models:tiny", "--input-shape", "8",
                        "--num-classes", "4", "--modes", "fp32", "--steps", "1", "--warmup", "0", "--compile", "on", "--device", "cpu",
                        "--json", str(tmp_path / "b.json")], capture_output=True, text=True, timeout=600, cwd=here)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "leaked semaphore" not in r.stderr and "resource_tracker" not in r.stderr, r.stderr[-2000:]
