"""The report page's bench table fits a 1280-pixel window (issue #49: its TFLOP/s and MFU columns
were cut off): every column of a bench with all its columns (max batch, interval and repeats,
TFLOP/s, MFU) and all five modes lies inside the window, read from headless Chromium's layout."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import chromium
from ampkit.bench.report import BenchReport, BenchRow, derive_relative

pytestmark = pytest.mark.skipif(chromium.find() is None, reason="needs chromium (CI installs Debian's package)")

LAYOUT = """(() => { const t = document.querySelector('table.bench-results');
  return {scroll: t.scrollWidth, client: t.clientWidth, window: window.innerWidth,
          heads: Array.from(t.querySelectorAll('thead th')).map(th => [th.textContent, th.getBoundingClientRect().right])}; })()"""


def _wide_bench() -> BenchReport:
    def row(mode, sps, p50, **kw):
        return BenchRow(mode, batch_size=256, samples_per_s=sps, step_ms={"p50": p50, "p90": p50 * 1.1},
                        peak_memory_bytes=123456789, final_loss=2.3012, first_loss=2.31, steps=30, warmup=5,
                        step_times_ms=[p50] * 30, tflops=123.45, mfu=0.4567, max_batch_size=4096, repeats=3, **kw)

    rows = [row("fp32", 12345.6, 207.4), row("tf32", 23456.7, 109.1), row("fp16", 34567.8, 74.1, warmup_skipped_steps=2),
            row("bf16", 35678.9, 71.8), row("fp8", 9999.9, 256.0, emulated=True)]
    derive_relative(rows)
    for r, ci in zip(rows, ([0.98, 1.02], [1.85, 1.95], [2.7, 2.9], [2.8, 2.95], None)):
        r.speedup_ci = ci
    return BenchReport(workload="resnet50", device="cuda:0 (NVIDIA A100-SXM4-80GB)", results=rows,
                       environment={"framework": "torch"}, config={"steps": 30, "warmup": 5, "repeats": 3})


def test_every_bench_column_is_inside_a_1280_pixel_window(tmp_path):
    doc = tmp_path / "bench.json"
    doc.write_text(json.dumps(_wide_bench().to_dict()))
    page = tmp_path / "report.html"
    r = subprocess.run([sys.executable, "-m", "ampkit", "report", str(doc), "--html", str(page)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    layout = chromium.load_page(str(page), width=1280, height=1200, evaluate={"t": LAYOUT})["values"]["t"]
    heads = dict(layout["heads"])
    assert {"TFLOP/s", "MFU", "interval", "repeats", "max batch"} <= set(heads)
    assert layout["scroll"] <= layout["client"], layout  # nothing to scroll to
    assert all(right <= layout["window"] for right in heads.values()), layout
