"""Issue 23: the doctor measures where a gain lives -- each mode's matmul against fp32's at small,
medium and large sizes, with intervals, in ``speedup_by_size`` and in the reason; a size too slow to
time is left out with the reason. Timed by a planted clock (each op returns its own duration), so
the figures are exact."""

from __future__ import annotations

import pytest

from ampkit.doctor.report import ModeReport
from ampkit.doctor.sizes import measure_sizes, size_words
from ampkit.doctor.verdicts import evaluate
from ampkit.rounds import Work

#: planted kernel speed of each mode relative to fp32, per size: bf16 loses at 64², gains at 1024²
GAIN = {"fp32": {64: 1.0, 256: 1.0, 1024: 1.0}, "bf16": {64: 0.8, 256: 2.0, 1024: 4.0},
        "fp16": {64: 0.01, 256: 0.01, 1024: 0.01}}


class PlantedClock:
    """``time(fn, reps)``: ``fn()`` returns the seconds one call 'took'."""

    def sync(self) -> None:
        pass

    def time(self, fn, reps):
        return [fn() for _ in range(reps)]


def _at(mode: str, n: int) -> Work:
    seconds = n**3 * 1e-11 / GAIN[mode][n]
    return Work({"matmul": (lambda: seconds, 2.0 * n**3)}, {}, PlantedClock())


def test_each_size_gets_the_planted_speedup_with_its_interval():
    table = measure_sizes("bf16", _at, (64, 256, 1024))
    assert {n: v["speedup"] for n, v in table.items()} == {"64": 0.8, "256": 2.0, "1024": 4.0}
    assert table["1024"]["ci"] == pytest.approx([4.0, 4.0]) and table["64"]["rounds"] >= 3
    assert size_words("bf16", table) == "bf16: 4.00x at 1024², 2.00x at 256², 0.80x at 64²"


def test_a_size_too_slow_to_time_is_left_out_with_the_reason():
    # fp16 at 256² takes 17 ms a call, so 1024² would take about 1.07 s: over the 0.05 s limit
    table = measure_sizes("fp16", _at, (64, 256, 1024), max_call_s=0.05)
    assert table["64"]["speedup"] == 0.01 and table["256"]["speedup"] == 0.01
    assert table["1024"] == {"skipped": "one 1024² matmul would take about 1.07 s (from 256²); not measured"}


def test_a_failing_size_is_reported_not_raised():
    def broken(mode, n):
        if n == 256 and mode == "bf16":
            raise RuntimeError("no bf16 kernel at this size")
        return _at(mode, n)
    table = measure_sizes("bf16", broken, (64, 256, 1024))
    assert table["64"]["speedup"] == 0.8 and "no bf16 kernel" in table["256"]["skipped"] and "1024" not in table


def _work(mode: str) -> Work:
    kernel = _at(mode, 256).kernels["matmul"]
    return Work({"matmul": kernel}, {"train": (lambda: 0.01 / GAIN[mode][256], None)}, PlantedClock(),
                at_size=lambda n: _at(mode, n))


def test_the_doctor_fills_speedup_by_size_and_names_it_in_the_reason():
    reports, recommended, _ = evaluate(("fp32", "bf16"), lambda m: (True, "ok"), lambda m: ("pass", "ok"), _work,
                                       quick=False, sizes=(64, 256, 1024))
    bf16 = reports["bf16"]
    assert bf16.speedup_by_size == {"64": 0.8, "256": 2.0, "1024": 4.0}
    assert bf16.speedup_by_size_ci["64"] == pytest.approx([0.8, 0.8])
    assert recommended == "bf16" and "by size: bf16: 4.00x at 1024², 2.00x at 256², 0.80x at 64²" in bf16.reason
    assert reports["fp32"].speedup_by_size is None
    # round trip through the document
    again = ModeReport.from_dict(bf16.to_dict())
    assert again.speedup_by_size == bf16.speedup_by_size and again.speedup_by_size_ci == bf16.speedup_by_size_ci


def test_a_backend_without_sized_work_has_no_table():
    def unsized(mode):
        w = _work(mode)
        w.at_size = None
        return w
    reports, _, _ = evaluate(("fp32", "bf16"), lambda m: (True, "ok"), lambda m: ("pass", "ok"), unsized,
                             quick=False, sizes=(64, 256))
    assert reports["bf16"].speedup_by_size is None and "by size" not in reports["bf16"].reason
