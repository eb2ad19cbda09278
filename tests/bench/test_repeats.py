"""bench --repeats (interleaved, folded rows, paired speedup intervals) and --modes ...,auto."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ampkit.bench.config import BenchConfig
from ampkit.bench.repeats import apply_auto, fold, mark_auto, paired_speedups, sequence
from ampkit.bench.report import BenchRow, derive_relative
from ampkit.errors import UsageError
from ampkit.precision import parse_mode_list
from helpers import assert_usage_error


def _row(mode, sps, status="ok"):
    return BenchRow(mode, status=status, batch_size=8, samples_per_s=sps, step_ms={"p50": 8e3 / sps, "p90": 9e3 / sps},
                    peak_memory_bytes=1000, final_loss=0.5)


def test_sequence_is_interleaved_and_reversed_every_repeat():
    assert sequence(["fp32", "bf16"], 3) == [(0, "fp32"), (0, "bf16"), (1, "bf16"), (1, "fp32"), (2, "fp32"), (2, "bf16")]
    assert sequence(["fp32", "bf16"], 1) == [(0, "fp32"), (0, "bf16")]


def test_fold_reports_medians_and_a_paired_interval_holding_the_speedup():
    runs = {"fp32": [_row("fp32", 100), _row("fp32", 50), _row("fp32", 110)],  # repeat 2: the machine was busy
            "bf16": [_row("bf16", 150), _row("bf16", 74), _row("bf16", 170)]}
    rows = fold(runs, ["fp32", "bf16"], 3)
    derive_relative(rows)
    paired_speedups(runs, rows)
    fp32, bf16 = rows
    assert fp32.repeats == bf16.repeats == 3 and bf16.runs == [150, 74, 170]
    assert bf16.samples_per_s == 150 and fp32.samples_per_s == 100  # medians
    low, high = bf16.speedup_ci
    assert low <= bf16.speedup_vs_fp32 <= high
    assert bf16.speedup_vs_fp32 == pytest.approx(1.5)  # median of 1.5, 1.48, 1.545 (paired by repeat)
    assert low == pytest.approx(1.48, abs=1e-4) and high == pytest.approx(170 / 110, abs=1e-4)  # 3 repeats: the range


def test_one_repeat_has_no_interval():
    runs = {"fp32": [_row("fp32", 100)], "bf16": [_row("bf16", 150)]}
    rows = fold(runs, ["fp32", "bf16"], 1)
    derive_relative(rows)
    assert rows[1].speedup_vs_fp32 == pytest.approx(1.5) and rows[1].speedup_ci is None and rows[1].repeats == 1


def test_a_failed_repeat_makes_the_row_say_so():
    runs = {"fp32": [_row("fp32", 100), _row("fp32", 100)],
            "fp16": [_row("fp16", 90), BenchRow("fp16", status="error", error="boom")]}
    rows = fold(runs, ["fp32", "fp16"], 2)
    derive_relative(rows)
    paired_speedups(runs, rows)
    assert rows[1].status == "error" and rows[1].error == "boom" and rows[1].speedup_ci is None


@pytest.mark.parametrize("modes, resolved, want", [
    (["fp32", "auto"], "bf16", ["fp32", "bf16"]),
    (["fp32", "bf16", "auto"], "bf16", ["fp32", "bf16"]),   # already listed: runs once, marked
    (["auto", "fp32"], "fp32", ["fp32"]),                    # auto picks fp32 on a CPU without bf16
])
def test_auto_resolves_once_and_marks_its_row(modes, resolved, want):
    cfg = BenchConfig(modes=modes)
    calls = []
    auto = apply_auto(cfg.modes, lambda: calls.append(1) or (resolved, "because"))
    assert list(auto.modes) == want and calls == [1]
    assert cfg.modes == tuple(modes)  # the config is not written into: the choice is the result's
    rows = [_row(m, 100) for m in auto.modes]
    mark_auto(rows, auto)
    marked = [r.mode for r in rows if r.resolved_from == "auto"]
    assert marked == [resolved] and next(r for r in rows if r.mode == resolved).resolved_reason == "because"


def test_mode_lists_accept_auto_only_where_asked():
    assert parse_mode_list("fp32,auto", allow_auto=True) == ["fp32", "auto"]
    with pytest.raises(UsageError):
        parse_mode_list("fp32,auto")


def test_bad_repeats_is_exit_2():
    r = subprocess.run([sys.executable, "-m", "ampkit", "bench", "--framework", "torch", "--device", "cpu",
                        "--repeats", "0"], capture_output=True, text=True, timeout=120)
    assert_usage_error(r, "--repeats")


def test_cli_repeats_and_auto_tiny_run(tmp_path):
    """Acceptance: --repeats reports ``repeats`` and an interval holding the speedup; auto's row says so."""
    r = subprocess.run([sys.executable, "-m", "ampkit", "bench", "--framework", "torch", "--device", "cpu",
                        "--workload", "mlp", "--modes", "fp32,auto", "--repeats", "2", "--steps", "3", "--warmup", "1",
                        "--json", "-", "--csv", str(tmp_path / "rows.csv")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    rows = {row["mode"]: row for row in doc["results"]}
    assert doc["config"]["repeats"] == 2 and all(row["repeats"] == 2 for row in rows.values())
    auto = next(row for row in rows.values() if row["resolved_from"] == "auto")
    assert auto["resolved_reason"] and f"{auto['mode']} ran for auto" in r.stderr
    if auto["mode"] != "fp32":
        low, high = auto["speedup_ci"]
        assert low <= auto["speedup_vs_fp32"] <= high and len(auto["runs"]) == 2
    assert "95% interval" in r.stderr and "speedup_ci_low" in (tmp_path / "rows.csv").read_text()
