"""Issue 21: one document model. The typed classes are the only schema -- ``to_dict`` writes a
document through the one envelope, ``from_dict`` reads it back (an older one with its missing keys
defaulted, a malformed one refused in one line) -- and ``ampkit report`` loads through them."""

from __future__ import annotations

import json
import signal

import pytest

import neutral_reports as planted
from ampkit.audit.report import AuditReport
from ampkit.bench.report import BenchReport
from ampkit.doctor.report import DoctorReport, DoctorSet
from ampkit.envelope import DocumentError
from ampkit.parity.report import ParityReport
from ampkit.report import build, load, markdown

MAKERS = {"doctor": planted.doctor, "bench": planted.bench, "parity": planted.parity, "audit": planted.audit}


def _json(doc) -> dict:
    return json.loads(json.dumps(doc))


@pytest.mark.parametrize("command", list(MAKERS))
def test_every_document_starts_with_the_one_envelope(command):
    doc = MAKERS[command]("torch").to_dict()
    assert list(doc)[:3] == ["ampkit_version", "command", "environment"] and doc["command"] == command


def test_doctor_set_round_trips_and_its_parts_keep_or_inherit_an_environment():
    reports = {fw: planted.doctor(fw) for fw in ("torch", "tensorflow")}
    whole = DoctorSet(reports, reports["torch"].environment)
    doc = _json(whole.to_dict())
    assert list(doc) == ["ampkit_version", "command", "environment", "frameworks"] and "interrupted" not in doc
    again = DoctorSet.from_dict(doc)
    assert _json(again.to_dict()) == doc and not again.interrupted
    assert again.reports["tensorflow"].environment["framework"] == "tensorflow"
    del doc["frameworks"]["tensorflow"]["environment"]
    doc["interrupted"] = True
    cut = DoctorSet.from_dict(doc)
    assert cut.interrupted and cut.reports["tensorflow"].environment == doc["environment"]
    assert DoctorSet(reports, {}, interrupted=True).to_dict()["interrupted"] is True


def test_an_older_document_reads_with_defaults():
    bench = _json(planted.bench("torch").to_dict())
    contract = {"mode", "status", "error", "batch_size", "samples_per_s", "step_ms", "peak_memory_bytes",
                "max_batch_size", "speedup_vs_fp32"}
    bench["results"] = [{k: v for k, v in r.items() if k in contract} for r in bench["results"]]
    for key in ("config", "note", "interrupted", "sample_inputs", "world_size", "flops_per_sample"):
        del bench[key]
    rep = BenchReport.from_dict(bench)
    assert rep.results[0].repeats == 1 and rep.results[0].flags == [] and rep.config == {} and not rep.interrupted

    parity = _json(planted.parity("torch").to_dict())
    for key in ("tolerance", "epochs", "device", "alpha"):
        del parity[key]
    for r in parity["results"]:
        del r["runs"], r["seeds"]
    rep = ParityReport.from_dict(parity)
    assert rep.tolerance is None and rep.epochs is None and rep.results[1].runs == [] and rep.results[1].seeds == []

    audit = _json(planted.audit("torch").to_dict())
    for key in ("steps", "device", "skipped_steps", "workload"):
        del audit[key]
    rep = AuditReport.from_dict(audit)
    assert rep.steps == 1 and rep.skipped_steps == 0 and rep.workload is None

    doctor = _json(planted.doctor("torch").to_dict())
    for key in ("quick", "variants", "auto_cache", "elapsed_s"):
        del doctor[key]
    del doctor["modes"]["bf16"]["speedup_ci"]
    rep = DoctorReport.from_dict(doctor)
    assert rep.variants == {} and rep.modes["bf16"].speedup_ci is None and not rep.failed


@pytest.mark.parametrize("cls, make, edit, message", [
    (BenchReport, planted.bench, lambda d: d["results"][0].update(status="fine"),
     "results[0].status is 'fine', expected one of ok, unsupported, oom, error"),
    (BenchReport, planted.bench, lambda d: d.pop("workload"), "lacks the key 'workload'"),
    (DoctorReport, planted.doctor, lambda d: d["modes"]["fp16"].update(speedup="fast"),
     'modes.fp16.speedup should be a number or null, found "fast"'),
    (ParityReport, planted.parity, lambda d: d["results"][1].update(verdict="ok"),
     "results[1].verdict is 'ok', expected one of baseline, pass, fail, inconclusive, not_measured"),
    (AuditReport, planted.audit, lambda d: d.update(first_nonfinite={"name": "boom"}),
     "first_nonfinite lacks the key 'phase'"),
])
def test_a_malformed_document_is_refused_in_one_line(cls, make, edit, message):
    doc = _json(make("torch").to_dict())
    edit(doc)
    with pytest.raises(DocumentError) as info:
        cls.from_dict(doc)
    assert str(info.value) == message


def test_report_reads_an_audit_with_a_contract_finding(tmp_path):
    doc = _json(planted.audit("torch").to_dict())
    doc["findings"] = [{"layer": "head", "kind": "contract", "severity": "warning", "advice": "call mp.prepare"}]
    path = tmp_path / "audit.json"
    path.write_text(json.dumps(doc))
    (loaded,) = load(str(path))
    assert isinstance(loaded.report, AuditReport) and loaded.report.findings[0].level == "warning"
    assert "1 finding: 1 warning" in markdown(build([loaded]))


def test_an_interrupted_framework_all_document_marks_its_parts(tmp_path):
    reports = {"torch": planted.doctor("torch")}
    path = tmp_path / "doctor.json"
    path.write_text(json.dumps(DoctorSet(reports, reports["torch"].environment, interrupted=True).to_dict()))
    (part,) = load(str(path))
    assert part.part == "torch" and part.interrupted and part.version


@pytest.mark.parametrize("framework, finished, code", [("all", 1, 130), ("torch", 0, 130), ("all", 2, 0)])
def test_doctor_cli_writes_the_typed_document(framework, finished, code, tmp_path, monkeypatch, capsys):
    """--framework all: one document of both; interrupted (any --framework): the finished ones, marked."""
    import ampkit.doctor
    from ampkit.cli.main import main

    def fake(fw, device, quick=False, progress=None, thorough=False, threads=None):
        if fake.calls == finished:
            raise KeyboardInterrupt
        fake.calls += 1
        return planted.doctor(fw)

    fake.calls = 0
    monkeypatch.setattr(ampkit.doctor, "run_doctor", fake)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc = main(["doctor", "--framework", framework, "--quick", "--json", str(tmp_path / "d.json")])
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    doc = json.loads((tmp_path / "d.json").read_text())
    assert rc == code and list(doc)[:3] == ["ampkit_version", "command", "environment"]
    assert list(doc["frameworks"]) == ["torch", "tensorflow"][:finished]
    assert doc.get("interrupted", False) is (code != 0)
    err = capsys.readouterr().err
    if code:
        assert f"kept the {finished} finished framework(s)" in err
