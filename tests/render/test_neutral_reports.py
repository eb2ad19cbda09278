"""The neutral layer fed with torch- and TensorFlow-shaped reports: each document and each header
names the framework that ran — a report cannot say "torch" for a TensorFlow run again."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

import neutral_reports as planted
from ampkit.audit.report import AuditReport
from ampkit.bench.report import BenchReport
from ampkit.doctor.report import DoctorReport
from ampkit.parity.report import ParityReport
from ampkit.render import audit as render_audit
from ampkit.render import bench as render_bench
from ampkit.render import doctor as render_doctor
from ampkit.render import parity as render_parity

FRAMEWORKS = ["torch", "tensorflow"]
KINDS = {
    "doctor": (planted.doctor, DoctorReport, render_doctor),
    "bench": (planted.bench, BenchReport, render_bench),
    "parity": (planted.parity, ParityReport, render_parity),
    "audit": (planted.audit, AuditReport, render_audit),
}


def _text(render, report) -> str:
    buf = io.StringIO()
    render.render(report, Console(file=buf, width=200, color_system=None))
    return buf.getvalue()


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("command", list(KINDS))
def test_document_names_the_framework_that_ran_and_round_trips(command, framework):
    make, cls, _ = KINDS[command]
    doc = json.loads(json.dumps(make(framework).to_dict()))
    assert doc["command"] == command and doc["framework"] == framework
    assert doc["environment"]["framework"] == framework
    again = cls.from_dict(doc).to_dict()
    assert json.loads(json.dumps(again)) == doc


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("command", list(KINDS))
def test_human_output_names_the_framework_that_ran(command, framework):
    make, _, render = KINDS[command]
    text = _text(render, make(framework))
    other = {"torch": "tensorflow", "tensorflow": "torch"}[framework]
    assert framework in text and other not in text


def test_doctor_header_shows_each_frameworks_own_versions():
    torch_text = _text(render_doctor, planted.doctor("torch"))
    tf_text = _text(render_doctor, planted.doctor("tensorflow"))
    assert "torch 2.99.0 (cuda build)" in torch_text and "torch threads 2" in torch_text
    assert "NVIDIA H200" in torch_text and "CUDA 12.8" in torch_text
    assert "tensorflow 2.77.0 (Keras 3.99.0)" in tf_text
    assert "None build" not in tf_text and "torch" not in tf_text.replace("tensorflow", "")


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_bench_relative_figures_are_ratios_of_the_rows(framework):
    from ampkit.bench.report import derive_relative

    report = planted.bench(framework)
    derive_relative(report.results)
    fp32, bf16, fp16 = report.results
    assert fp32.speedup_vs_fp32 == 1.0 and bf16.speedup_vs_fp32 == pytest.approx(2.5)
    assert bf16.memory_saving_vs_fp32 == pytest.approx(400 / 250)
    assert fp16.speedup_vs_fp32 is None and fp16.memory_saving_vs_fp32 is None  # an error row has no ratio


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_audit_findings_come_from_the_statistics_alone(framework):
    from ampkit.audit.core import Advice, findings_for
    from ampkit.formats import format_of

    report = planted.audit(framework)
    words = {"torch": Advice(lambda name: f"keep {name} in float32", "GradScaler", "init_scale"),
             "tensorflow": Advice(lambda name: f"dtype='float32' on {name}", "LossScaleOptimizer", "initial_scale")}
    findings, _ = findings_for(report.layers, format_of("fp16"), "fp16", 65536.0, report.first_nonfinite, False,
                               words[framework])
    kinds = {(f.layer, f.kind) for f in findings}
    assert ("boom", "nonfinite") in kinds and ("boom", "overflow") in kinds and ("head", "overflow") in kinds
    assert not any(f.layer == "encoder.0" for f in findings)
    assert findings[0].kind == "nonfinite"  # most severe first
    other = {"torch": "LossScaleOptimizer", "tensorflow": "GradScaler"}[framework]
    assert not any(other in f.advice for f in findings)  # each framework's own words
    assert any(words[framework].scaler in f.advice for f in findings)
    bf16, _ = findings_for(report.layers[:1], format_of("bf16"), "bf16", 1.0, None, False, words[framework])
    assert bf16 == []


def test_recommendation_needs_a_passed_self_test_and_never_picks_fp8():
    from ampkit.doctor.verdicts import recommend

    modes = planted.doctor("torch").modes
    assert recommend(modes, quick=False)[0] == "bf16"
    modes["bf16"].selftest = "fail"
    assert recommend(modes, quick=False)[0] == "fp32"
    modes["fp8"].selftest, modes["fp8"].accelerated, modes["fp8"].speedup = "pass", True, 9.0
    assert recommend(modes, quick=False)[0] == "fp32"


def test_a_name_in_square_brackets_is_printed_not_read_as_markup():
    """A user's model path or data set such as '/tmp/we$ird [x]/m.py:f' is shown whole in every title."""
    audit, parity = planted.audit("torch"), planted.parity("torch")
    audit.workload, parity.dataset = "/tmp/we$ird [x]/m-1.py:f", "[red]/d.py:data"
    assert "/tmp/we$ird [x]/m-1.py:f (torch)" in _text(render_audit, audit)
    assert "[red]/d.py:data (torch)" in _text(render_parity, parity)


def test_module_names_in_square_brackets_are_printed_whole_in_every_audit_table():
    """A module or layer name is the user's (a ModuleDict key, a Keras layer's name): 'blocks[attn]'
    is shown whole in the layer table, a finding's line, the what-if table and the fp8 table, never
    read as rich markup (which dropped '[attn]')."""
    from ampkit.audit.report import Finding

    odd = "blocks[attn].proj[red]"
    rep = planted.audit("torch")
    rep.layers[1].name, rep.first_nonfinite["name"] = odd, odd
    rep.layers[1].type = "Scale[x]"
    rep.findings = [Finding(odd, "nonfinite", "keep it in float32", severity=0)]
    text = _text(render_audit, rep)
    assert f"{odd} ← first inf/NaN (forward)" in text and "Scale[x]" in text
    assert f"error nonfinite {odd}: keep it in float32" in text

    whatif = planted.audit("torch")
    whatif.what_if = {"fp16": {"verdict": "overflows", "first_overflow": odd, "loss_scale_range": None,
                               "keep_in_fp32": [odd, "head[b]"], "advice": "keep them in float32"}}
    text = _text(render_audit, whatif)
    assert text.count(odd) >= 2 and "head[b]" in text

    fp8 = planted.audit("torch")
    fp8.mode, fp8.findings = "fp8", [Finding(odd, "precision", "keep it in bf16", severity=2)]
    fp8.layers[1].name = odd
    fp8.layers[1].fp8 = {"converted": False, "reason": "the first Linear layer: kept in bf16"}
    text = _text(render_audit, fp8)
    assert text.count(odd) == 2, text
