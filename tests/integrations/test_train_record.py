"""ampkit.integrations.record.TrainRecord on hand-made steps (no framework): which steps are
failures, the origin it names, the scheduler check, and that its document is an audit document."""

from __future__ import annotations

import json
import warnings

import pytest

from ampkit.integrations.record import SchedulerStepWarning, StepRow, TrainRecord
from ampkit.report.load import load

INF, NAN = float("inf"), float("nan")


def _record(tmp_path, scaler):
    rec = TrainRecord(source="test", trainer="trainer 1.0", k=3, json_path=str(tmp_path / "r.json"))
    rec.set_modules([("a", "Linear"), ("b", "ReLU"), ("c", "Linear")], ["a", "c"])
    rec.scaler, rec.mode = scaler, "fp16" if scaler else "bf16"
    return rec


def test_gradient_overflow_under_a_scaler_is_a_skipped_step_not_a_failure(tmp_path):
    rec = _record(tmp_path, scaler=True)
    assert not rec.add(StepRow(1, 0.5, [1.0, 1.0, 1.0], [INF, INF], 1024.0, 512.0, True))
    assert rec.first is None and rec.skipped == [1] and not (tmp_path / "r.json").exists()


def test_without_a_scaler_the_backward_origin_is_the_latest_module_in_forward_order(tmp_path):
    rec = _record(tmp_path, scaler=False)
    rec.add(StepRow(1, 0.5, [1.0, 1.0, 1.0], [0.1, 0.2]))
    assert rec.add(StepRow(2, 0.5, [1.0, 1.0, 1.0], [NAN, INF]))
    assert rec.first == {"name": "c", "phase": "backward", "step": 2, "op": None, "in_reference": False}
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["ring_buffer"]["grad_norm"]["c"] == [0.2, "inf"] and doc["ring_buffer"]["steps"] == [1, 2]


def test_forward_origin_is_the_first_module_that_went_non_finite_and_the_ring_keeps_k(tmp_path):
    rec = _record(tmp_path, scaler=True)
    for s in range(1, 5):
        rec.add(StepRow(s, 0.5, [1.0, 2.0, 3.0], [0.1, 0.1], 8.0, 8.0, False))
    assert rec.add(StepRow(5, NAN, [1.0, INF, NAN], [NAN, NAN], 8.0, 4.0, True))
    assert rec.first == {"name": "b", "phase": "forward", "step": 5, "op": None, "in_reference": False}
    assert [r.step for r in rec.failure_rows] == [3, 4, 5]      # k = 3
    assert not rec.add(StepRow(6, NAN, [INF, INF, INF], [NAN, NAN], 4.0, 2.0, True))   # only the first
    report = load(str(tmp_path / "r.json"))[0].report
    assert report.first_nonfinite["name"] == "b" and report.mode == "fp16" and report.loss_scale == 8.0
    assert [f.kind for f in report.findings] == ["nonfinite"]


def test_scheduler_check_fires_once_on_a_counter_that_moved_after_a_skipped_step(tmp_path):
    rec = _record(tmp_path, scaler=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rec.add(StepRow(1, 0.5, [1.0] * 3, [0.1] * 2, 8.0, 8.0, False, (0,)))
        rec.add(StepRow(2, 0.5, [1.0] * 3, [INF] * 2, 8.0, 4.0, True, (1,)))
        rec.add(StepRow(3, 0.5, [1.0] * 3, [INF] * 2, 4.0, 2.0, True, (1,)))   # step 2's skip: counter stayed
        rec.add(StepRow(4, 0.5, [1.0] * 3, [0.1] * 2, 2.0, 2.0, False, (2,)))  # step 3's skip: it moved
        rec.finish((3,))
    fired = [w for w in caught if issubclass(w.category, SchedulerStepWarning)]
    assert len(fired) == 1 and "advanced on step 3" in str(fired[0].message) and "trainer 1.0" in str(fired[0].message)
    assert rec.sched_advanced_on_skip == [3]


@pytest.mark.parametrize("declared,mode,scaler,said", [("fp16", "fp32", False, True), ("fp16", "bf16", False, True),
                                                        ("fp16", "fp16", True, False), ("bf16", "bf16", False, False)])
def test_precision_line_only_where_the_declared_mode_does_not_run(tmp_path, declared, mode, scaler, said):
    rec = _record(tmp_path, scaler)
    line = rec.precision(declared=declared, setting=f"X({declared})", mode=mode, scaler=scaler)
    assert (line is not None) == said and len(rec.warnings) == int(said)


def test_an_unwritable_json_path_is_one_logged_line_and_the_run_goes_on(tmp_path, caplog, monkeypatch):
    """A json_path under a file (or in /proc) raised NotADirectoryError/FileNotFoundError from
    on_train_end after the whole run, and at the first failure in the middle of it; '~' made a
    directory named '~' in the working directory."""
    (tmp_path / "afile").write_text("x")
    rec = TrainRecord(source="test", trainer="trainer 1.0", k=3, json_path=str(tmp_path / "afile" / "sub" / "r.json"))
    rec.set_modules([("a", "Linear"), ("b", "ReLU"), ("c", "Linear")], ["a", "c"])
    rec.scaler, rec.mode = False, "bf16"
    with caplog.at_level("WARNING"):
        assert rec.add(StepRow(1, NAN, [1.0, NAN, NAN], [NAN, NAN]))
        assert rec.write(rec.json_path) is None
    assert rec.first == {"name": "b", "phase": "forward", "step": 1, "op": None, "in_reference": False} and rec.failure_path is None
    said = [r.getMessage() for r in caplog.records if "could not write" in r.getMessage()]
    assert len(said) == 2 and "NotADirectoryError" in said[0] and "the run goes on" in said[0]
    assert not any("steps before it are in" in r.getMessage() for r in caplog.records)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert rec.write("~/home.json") == str(tmp_path / "home.json") and (tmp_path / "home.json").exists()
    assert not (tmp_path / "~").exists()
