"""Issue 20: the report's labels -- an audit with findings is never "clean", a bench speedup that
cannot be told from noise is neither green nor red, a withheld speedup says why."""

from __future__ import annotations

import json

import pytest

from ampkit.render.audit import findings_summary
from ampkit.report import build, html, load, markdown

ENV = {"framework": "torch", "framework_version": "2.9.0", "python": "3.11", "platform": "Linux",
       "cpu": {"model": "Test CPU"}}


def _audit(findings, first=None):
    return {"ampkit_version": "0", "command": "audit", "environment": ENV, "workload": "mlp", "mode": "fp16",
            "loss_scale": 65536.0, "steps": 1, "device": "cpu", "first_nonfinite": first,
            "layers": [{"name": "0", "type": "Linear", "fwd_amax": 1.0, "fwd_headroom_log2": 15.0,
                        "fwd_underflow_frac": 0.0, "fwd_nonfinite": 0, "grad_amax": 1.0, "grad_underflow_frac": 0.0,
                        "grad_nonfinite": 0}],
            "findings": [{"layer": "0", "kind": k, "severity": s, "advice": "do something"} for k, s in findings]}


def _bench(rows):
    base = {"status": "ok", "error": None, "batch_size": 8, "step_ms": {"p50": 10.0, "p90": 11.0},
            "peak_memory_bytes": 1000, "max_batch_size": None, "memory_saving_vs_fp32": 1.0, "skipped_steps": 0,
            "final_loss": 1.0, "tflops": None, "mfu": None}
    return {"ampkit_version": "0", "command": "bench", "environment": ENV, "workload": "mlp", "framework": "torch",
            "device": "cpu", "world_size": 1, "results": [{**base, **r} for r in rows]}


def _verdicts(tmp_path, doc, name="doc.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    report = build(load(str(path)))
    (env,) = report.environments
    return report, {row["key"]: row for row in env.verdicts()}


def test_an_audit_with_findings_is_never_clean(tmp_path):
    doc = _audit([("overflow", "error")] + [("underflow", "warning")] * 20 + [("precision", "note")] * 8)
    report, rows = _verdicts(tmp_path, doc)
    row = rows["audit mlp: fp16"]
    assert row["text"] == "29 findings: 1 error, 20 warnings, 8 notes" and row["tone"] == "bad"
    assert "clean" not in row["text"]
    page = html(report)
    assert "29 findings: 1 error, 20 warnings, 8 notes" in page and "<th>severity</th>" in page
    assert "29 findings" in markdown(report)


@pytest.mark.parametrize("findings, text, tone", [
    ([], "clean", "good"),
    ([("underflow", "warning")], "1 finding: 1 warning", "neutral"),
    ([("precision", "note"), ("precision", "note")], "2 findings: 2 notes", "muted"),
])
def test_audit_summary_by_severity(tmp_path, findings, text, tone):
    _, rows = _verdicts(tmp_path, _audit(findings))
    assert (rows["audit mlp: fp16"]["text"], rows["audit mlp: fp16"]["tone"]) == (text, tone)


def test_findings_without_a_severity_are_still_counted():
    assert findings_summary([{"kind": "overflow"}, {"kind": "underflow"}]) == ("2 findings", "neutral")


def test_audit_with_a_first_nonfinite_says_so_and_counts(tmp_path):
    _, rows = _verdicts(tmp_path, _audit([("nonfinite", "error")], first={"name": "0", "phase": "backward"}))
    row = rows["audit mlp: fp16"]
    assert row["text"] == "inf/NaN first in 0 (backward); 1 finding: 1 error" and row["tone"] == "bad"


def test_bench_tones_follow_the_interval_not_the_point(tmp_path):
    doc = _bench([
        {"mode": "fp32", "samples_per_s": 100.0, "speedup_vs_fp32": 1.0, "speedup_verdict": "baseline"},
        {"mode": "bf16", "samples_per_s": 300.0, "speedup_vs_fp32": 3.0, "speedup_ci": [0.4, 5.0],
         "speedup_verdict": "no measurable difference"},      # the user's 3.41x-then-0.45x BERT
        {"mode": "fp16", "samples_per_s": 45.0, "speedup_vs_fp32": 0.45, "speedup_ci": [0.40, 0.50],
         "speedup_verdict": "slower"},
        {"mode": "tf32", "samples_per_s": 150.0, "speedup_vs_fp32": 1.5, "speedup_ci": [1.3, 1.7]},  # words from the interval
    ])
    report, rows = _verdicts(tmp_path, doc)
    assert rows["bench mlp: bf16"]["tone"] == "neutral" and "no measurable difference" in rows["bench mlp: bf16"]["text"]
    assert rows["bench mlp: fp16"]["tone"] == "bad"
    assert rows["bench mlp: tf32"]["tone"] == "good"
    page = html(report)
    assert "no measurable difference" in page and "memory vs fp32" in page


def test_an_old_one_run_document_without_an_interval_is_neither_green_nor_red(tmp_path):
    doc = _bench([{"mode": "fp32", "samples_per_s": 100.0, "speedup_vs_fp32": 1.0},
                  {"mode": "bf16", "samples_per_s": 341.0, "speedup_vs_fp32": 3.41}])
    _, rows = _verdicts(tmp_path, doc)
    assert rows["bench mlp: bf16"]["tone"] == "neutral" and "one run, no interval" in rows["bench mlp: bf16"]["text"]


def test_a_flagged_bench_row_shows_why_and_no_speedup(tmp_path):
    doc = _bench([{"mode": "fp32", "samples_per_s": 100.0, "speedup_vs_fp32": 1.0},
                  {"mode": "fp16", "samples_per_s": 120.0, "speedup_vs_fp32": None, "flags": ["diverged"],
                   "warning": "final loss 2.79 against fp32's 1.05", "memory_saving_vs_fp32": 0.88,
                   "warmup_skipped_steps": 2}])
    report, rows = _verdicts(tmp_path, doc)
    assert rows["bench mlp: fp16"]["text"] == "ok, loss diverged: no speedup claimed"
    assert rows["bench mlp: fp16"]["tone"] == "bad"
    page, md = html(report), markdown(report)
    for text in (page, md):
        assert "none claimed" in text and "final loss 2.79 against fp32" in text and "1.14× more" in text


def test_a_doctor_verdict_names_the_figures_behind_it():
    """A mode whose kernels ran faster while its training steps ran slower is 'slower' on the page with
    both figures named, not next to the kernels' 1.30× alone."""
    from ampkit.render.doctor import DoctorView, verdicts

    rows = [{"mode": "fp16", "verdict": "slower", "speedup": 1.3, "training_speedup": 0.05},
            {"mode": "bf16", "verdict": "usable", "speedup": 1.1, "training_speedup": None}]
    texts = {v["key"]: v["text"] for v in verdicts(DoctorView(None, rows, "fp32", "", "cpu", False))}
    assert texts["doctor: fp16"].endswith("(kernels 1.30×, training 0.05×)"), texts
    assert texts["doctor: bf16"].endswith("(1.10×)"), texts
