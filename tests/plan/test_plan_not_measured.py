"""Issue #40 (no verdict from nothing), in ``ampkit plan``: when no candidate got as far as a bench
of its plan -- the --budget spent before the first, its bench row unsupported or out of memory, its
audit stopped by --timeout -- the plan is plain fp32 with status ``not_measured`` and says why, never
"no mode trains finite and equivalent" (a claim about candidates nobody measured)."""

from __future__ import annotations

import pytest

from ampkit.audit.report import AuditReport
from ampkit.bench.report import BenchReport, BenchRow
from ampkit.plan import loop
from ampkit.plan.report import PlanReport


def _bench(rows):
    return BenchReport("m:f", "cpu", [BenchRow(mode, status=status, samples_per_s=100.0 if status == "ok" else None,
                                               error=None if status == "ok" else "no memory")
                                      for mode, status in rows], {})


@pytest.fixture
def fake_runs(monkeypatch):
    from ampkit.audit import driver as audit_driver
    from ampkit.bench import driver as bench_driver

    state = {"bench": [("fp32", "ok"), ("bf16", "ok")], "audit": None}
    monkeypatch.setattr(bench_driver, "run", lambda cfg, backend: _bench(state["bench"]))
    monkeypatch.setattr(audit_driver, "run", lambda cfg, backend: state["audit"])
    return state


def test_a_budget_spent_before_any_candidate_is_not_measured(fake_runs, monkeypatch):
    clock = iter([0.0] + [100.0] * 10)  # the first reading starts the budget; every later one is past it
    monkeypatch.setattr(loop.time, "monotonic", lambda: next(clock))
    run = loop.run_plan(loop.PlanConfig(model="m:f", modes=("bf16",), budget_s=1.0, device="cpu"), "torch")
    assert run.status == "not_measured" and run.chosen.default == "fp32"
    assert run.chosen.evidence["why"] == "no candidate was measured (bf16: not tried: the --budget of 1 s was spent)"
    report = PlanReport.from_run(run, "m:f", None, None)
    assert PlanReport.from_dict(report.to_dict()).status == "not_measured"
    assert repr(report) == "<ampkit plan m:f on cpu: fp32; not measured>"


def test_a_candidate_out_of_memory_is_not_measured(fake_runs):
    fake_runs["bench"] = [("fp32", "ok"), ("bf16", "oom")]
    run = loop.run_plan(loop.PlanConfig(model="m:f", modes=("bf16",), device="cpu"), "torch")
    assert run.status == "not_measured" and "bf16: bench of bf16: oom: no memory" in run.note


def test_an_audit_stopped_by_its_timeout_proposes_no_plan(fake_runs):
    fake_runs["audit"] = AuditReport("bf16", 1.0, [], None, [], "cpu", 2, steps_completed=1, interrupted=True,
                                     error="auditing m:f: stopped at --timeout 5 s; what finished is kept")
    run = loop.run_plan(loop.PlanConfig(model="m:f", modes=("bf16",), device="cpu"), "torch")
    assert run.status == "not_measured"
    assert run.attempts[0].why == "audit of bf16: auditing m:f: stopped at --timeout 5 s; what finished is kept"


def test_a_plan_file_where_a_result_document_goes_is_named_as_such(tmp_path):
    import json

    from ampkit.errors import UsageError
    from ampkit.parity import grid
    from ampkit.report.load import load

    path = tmp_path / "p.plan"
    path.write_text(json.dumps({"kind": "ampkit-plan", "version": 1, "framework": "torch", "default": "bf16",
                                "modules": {}}))
    for read in (load, grid.read):  # ampkit report, parity --merge/--resume
        with pytest.raises(UsageError, match=r"p.plan: a precision plan \(what to keep in float32\), not a result "
                                             r"document; run it with 'ampkit bench\|parity --plan PATH'"):
            read(str(path))


def test_a_stage_stopped_by_ctrl_c_stops_the_plan_and_keeps_what_finished(fake_runs, monkeypatch):
    """Before: SIGTERM during the first bench was swallowed -- the plan went on with 'no row' for every
    candidate, wrote a plain fp32 plan file and exited 0."""
    from ampkit.bench import driver as bench_driver

    def stopped(cfg, backend):
        report = _bench([("fp32", "ok")])
        report.interrupted = True
        return report

    monkeypatch.setattr(bench_driver, "run", stopped)
    run = loop.run_plan(loop.PlanConfig(model="m:f", modes=("bf16",), device="cpu"), "torch")
    assert run.interrupted and run.status == "not_measured" and run.attempts == []
    assert [r["mode"] for r in run.order] == ["fp32"]  # the finished row is kept
    assert run.note == "stopped before a candidate was decided: no plan written"


def test_an_audit_stopped_by_ctrl_c_marks_its_candidate(fake_runs, monkeypatch):
    from ampkit.audit import driver as audit_driver
    from ampkit.isolation import PartialResult

    def stopped(cfg, backend):
        raise PartialResult(AuditReport("bf16", 1.0, [], None, [], "cpu", 2, steps_completed=0), KeyboardInterrupt())

    monkeypatch.setattr(audit_driver, "run", stopped)
    run = loop.run_plan(loop.PlanConfig(model="m:f", modes=("bf16",), device="cpu"), "torch")
    assert run.interrupted and run.status == "not_measured"
    assert [(a.mode, a.why) for a in run.attempts] == [("bf16", "stopped here (interrupted)")]


def test_the_cli_writes_no_plan_file_when_stopped_first(fake_runs, monkeypatch, tmp_path, capsys):
    import json

    from ampkit.bench import driver as bench_driver
    from ampkit.cli.main import main

    def stopped(cfg, backend):
        report = _bench([])
        report.interrupted = True
        return report

    monkeypatch.setattr(bench_driver, "run", stopped)
    monkeypatch.chdir(tmp_path)
    rc = main(["plan", "--device", "cpu", "--model", "m:f", "--modes", "bf16", "--out", "p.plan", "--json", "d.json"])
    assert rc == 130 and not (tmp_path / "p.plan").exists()
    doc = json.loads((tmp_path / "d.json").read_text())
    assert doc["interrupted"] is True and doc["status"] == "not_measured" and doc["out"] is None
    assert "kept the candidates tried so far (no plan written)" in capsys.readouterr().err


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_a_plan_file_the_os_refuses_is_one_line_and_a_fallback(fake_runs, monkeypatch, tmp_path, capsys):
    """Before: FileNotFoundError as a traceback, and the document lost with it."""
    import json

    from ampkit.cli.main import main

    monkeypatch.chdir(tmp_path)
    fake_runs["bench"] = [("fp32", "ok"), ("bf16", "oom")]
    rc = main(["plan", "--device", "cpu", "--model", "m:f", "--modes", "bf16", "--out", "/proc/p.plan",
               "--json", "d.json"])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    assert (f"ampkit: error: could not write --out to '/proc/p.plan' (No such file or directory); wrote it to "
            f"{tmp_path / 'p.plan'} instead") in err
    assert json.loads((tmp_path / "p.plan").read_text())["kind"] == "ampkit-plan"
    assert json.loads((tmp_path / "d.json").read_text())["out"] == str(tmp_path / "p.plan")
