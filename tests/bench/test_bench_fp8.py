"""bench's fp8 row (issue #28): trained through torchao, ``emulated`` where the hardware has no fp8,
memory always, a speedup only when not emulated; ``--modes all`` holds fp8 where torchao is installed."""

from __future__ import annotations

import pytest
import torch

from ampkit.bench.config import BenchConfig
from ampkit.bench.report import BenchReport, BenchRow, derive_relative
from ampkit.precision import COMMAND_MODES

pytest.importorskip("torchao")


def test_an_fp8_row_on_this_cpu_is_ok_and_emulated():
    from ampkit.backends.torch.bench import run_mode

    cfg = BenchConfig(workload="mlp", modes="fp32,fp8", steps=2, warmup=0, batch_size=8)
    fp8 = run_mode(cfg, "fp8", torch.device("cpu"), flops=None)  # in this process (bench spawns one per mode)
    assert fp8.status == "ok", fp8.error
    assert fp8.emulated is True and fp8.peak_memory_bytes and fp8.batch_size == 8 and len(fp8.step_times_ms) == 2
    fp32 = BenchRow("fp32", batch_size=8, samples_per_s=fp8.samples_per_s * 3, peak_memory_bytes=fp8.peak_memory_bytes * 2,
                    steps=2, step_times_ms=[t / 3 for t in fp8.step_times_ms], final_loss=fp8.final_loss,
                    first_loss=fp8.first_loss)
    derive_relative([fp32, fp8])
    assert fp8.speedup_vs_fp32 is None and fp8.speedup_ci is None and fp8.speedup_verdict is None
    assert fp8.memory_saving_vs_fp32 == 2.0 and "emulation" in fp8.speedup_note and fp32.speedup_vs_fp32 == 1.0


def test_emulated_rows_never_get_a_speedup_and_real_ones_do():
    def row(mode, sps, peak, emulated=False):
        return BenchRow(mode, batch_size=8, samples_per_s=sps, peak_memory_bytes=peak, steps=3, emulated=emulated,
                        step_times_ms=[8000 / sps] * 3, final_loss=1.0, first_loss=2.0)

    rows = [row("fp32", 100.0, 1000), row("fp8", 250.0, 500, emulated=True)]
    derive_relative(rows)
    assert rows[1].speedup_vs_fp32 is None and rows[1].memory_saving_vs_fp32 == 2.0
    rows = [row("fp32", 100.0, 1000), row("fp8", 250.0, 500)]
    derive_relative(rows)
    assert rows[1].speedup_vs_fp32 == 2.5 and rows[1].speedup_verdict == "faster"
    doc = BenchReport("mlp", "cpu", rows, {"framework": "torch"}).to_dict()
    assert [r["emulated"] for r in doc["results"]] == [False, False]
    assert BenchReport.from_dict(doc).results[1].emulated is False


def test_the_table_marks_the_emulated_column():
    from ampkit.render.bench import render
    from ampkit.render.output import console

    rows = [BenchRow("fp32", batch_size=8, samples_per_s=100.0, peak_memory_bytes=1000, steps=1),
            BenchRow("fp8", batch_size=8, samples_per_s=40.0, peak_memory_bytes=900, steps=1, emulated=True)]
    derive_relative(rows)
    con = console(False)
    with con.capture() as cap:
        render(BenchReport("mlp", "cpu", rows, {"framework": "torch"}, config={"steps": 1, "warmup": 0}), con)
    text = " ".join(cap.get().split())  # the note may fold at the console's width
    assert "fp8 (emulated)" in text and "no speedup is claimed" in text and "ok, emulated" in text


def test_modes_all_holds_fp8_where_torchao_is_installed():
    assert BenchConfig(modes="all").modes == COMMAND_MODES == ("fp32", "tf32", "fp16", "bf16", "fp8")
    assert BenchConfig(modes="fp8,fp32").modes == ("fp8", "fp32")
