"""Issue #40, after the first round: every result object's one-line repr is under 200 characters and
says what happened when the run was interrupted or holds nothing -- never a bare ``<ampkit doctor>``,
a dangling "; ", "interrupted" twice, or a verdict where nothing was measured -- and its HTML renders."""

from __future__ import annotations

import pytest

from ampkit.audit.report import AuditReport
from ampkit.bench.report import BenchReport
from ampkit.doctor.report import DoctorReport, DoctorSet
from ampkit.integrations.record import TrainRecord
from ampkit.parity.report import ParityReport, RunRecord
from ampkit.plan.report import PlanReport
from ampkit.plan_format import Plan

NM = {"verdict": "not_measured", "reason": "no step finished", "first_overflow": None, "loss_scale_range": None,
      "modules": []}

CASES = {
    "doctor-all-interrupted-before-any-framework": (
        lambda: DoctorSet({}, {}, interrupted=True), "<ampkit doctor: nothing finished (interrupted)>"),
    "doctor-with-no-mode-measured": (
        lambda: DoctorSet({"torch": DoctorReport("torch", "cpu", {}, "fp32", "nothing measured", {})}, {},
                          interrupted=True), "<ampkit doctor torch on cpu: recommended fp32 (interrupted)>"),
    "parity-seed-cut-short": (
        lambda: ParityReport("digits", "cpu", [], {}, 0.01, 1, interrupted=True,
                             unpaired_runs=[RunRecord("fp32", 0, [1.0], [0.5], [1.0], 0, 0.1)]),
        "<ampkit parity digits on cpu: no mode finished; 1 unpaired run(s) kept (interrupted)>"),
    "audit-stopped-before-a-step": (
        lambda: AuditReport("bf16", 1.0, [], None, [], "cpu", 5, steps_completed=0, interrupted=True,
                            error="auditing m:f: stopped at --timeout 3 s; it did not answer, nothing is kept"),
        "<ampkit audit model in bf16 on cpu: not measured (interrupted)>"),
    "what-if-stopped-before-a-step": (
        lambda: AuditReport("fp32", 1.0, [], None, [], "cpu", 3, steps_completed=0, interrupted=True,
                            what_if={"fp16": NM, "bf16": NM}),
        "<ampkit audit --what-if model on cpu: fp16 not measured · bf16 not measured (interrupted)>"),
    "bench-stopped-before-a-mode": (
        lambda: BenchReport("mlp", "cpu", [], {}, interrupted=True), "<ampkit bench mlp on cpu: no mode finished (interrupted)>"),
    "plan-interrupted": (
        lambda: PlanReport(Plan(framework="torch", default="bf16"), [], "interrupted", "cpu", interrupted=True),
        "<ampkit plan ? on cpu: bf16; interrupted>"),
    "callback-record-before-a-step": (
        lambda: TrainRecord(source="hf", trainer="Trainer"), "<ampkit hf: 0 steps in fp32, 0 skipped; no loss scaler; 0 warning(s)>"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_an_empty_or_interrupted_result_has_a_short_sensible_repr_and_html(name):
    make, expected = CASES[name]
    result = make()
    text = repr(result)
    assert text == expected and len(text) < 200 and "\n" not in text
    assert "<html" in result._repr_html_().lower() or "<div" in result._repr_html_()


def test_parity_per_seed_frame_shows_the_unpaired_runs_it_kept():
    report = CASES["parity-seed-cut-short"][0]()
    frame = report.to_pandas(per="seed")
    assert list(frame["mode"]) == ["fp32"] and list(frame["paired"]) == [False]
    assert report.to_pandas().shape[0] == 0  # no mode has statistics: no per-mode row
