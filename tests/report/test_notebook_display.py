"""Result objects in a notebook, without a kernel: ``_repr_html_`` (the report page's section, scoped
and self-contained), the one-line ``repr``, ``to_pandas()`` with the contract's keys, the generic
display a new result type (the precision plan) gets with one line, and the callback record."""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass, field

import pytest

import neutral_reports as planted
from ampkit.display import INSTALL_HINT, ResultDisplay, shorten
from ampkit.doctor.report import DoctorSet

FRAMEWORKS = ["torch", "tensorflow"]
#: the contract's keys of a bench row, a parity result and an audit layer (CONTRACT.md)
BENCH_KEYS = {"mode", "status", "error", "batch_size", "samples_per_s", "step_ms", "peak_memory_bytes", "max_batch_size",
              "speedup_vs_fp32", "memory_saving_vs_fp32", "skipped_steps", "final_loss", "tflops", "mfu"}
PARITY_KEYS = {"mode", "seeds", "final_loss", "metric", "delta_vs_fp32", "p_value", "verdict"}
LAYER_KEYS = {"name", "type", "fwd_amax", "fwd_headroom_log2", "fwd_underflow_frac", "fwd_nonfinite", "grad_amax",
              "grad_underflow_frac", "grad_nonfinite"}
DOCTOR_KEYS = {"mode", "supported", "accelerated", "speedup", "selftest", "verdict", "reason"}


def _bench(framework: str):
    """The planted bench with its relative figures (speedup, memory saving) derived as bench does."""
    from ampkit.bench.report import derive_relative

    report = planted.bench(framework)
    derive_relative(report.results)
    return report


def _self_contained(html: str) -> None:
    assert "<script" not in html.lower() and "<link" not in html.lower() and "@import" not in html
    refs = re.findall(r'\b(?:src|href|xlink:href|action|poster|data)\s*=\s*["\']([^"\']*)["\']', html, flags=re.I)
    assert [r for r in refs if not r.startswith(("#", "data:"))] == []
    assert set(re.findall(r'https?://[^\s"\'<>)]+', html)) <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}


def _scoped(html: str) -> None:
    """Every style rule is limited to the result's block: nothing restyles JupyterLab around it."""
    css = html[html.index("<style>") + 7:html.index("</style>")]
    selectors = [s.strip() for rule in re.findall(r"([^{}]+)\{[^{}]*\}", css) for s in rule.split(",")]
    assert selectors and all(s.startswith(".ampkit-nb") for s in selectors), [s for s in selectors if not s.startswith(".ampkit-nb")]
    assert '"Segoe UI"' in css  # the stylesheet as written, not HTML-escaped


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_bench_html_has_the_verdict_line_first_then_every_mode_in_its_table_and_an_inline_svg_chart(framework):
    html = _bench(framework)._repr_html_()
    _self_contained(html)
    _scoped(html)
    table = html[html.index('<table class="bench-results"'):]
    table = table[:table.index("</table>")]
    assert [m for m in re.findall(r"<tr><td>(\w+)", table)] == ["fp32", "bf16", "fp16"]
    assert "2.50×" in table and "RuntimeError: planted" in table
    assert html.index('class="verdict-line"') < html.index('class="bench-results"') < html.index("<svg")
    assert re.search(r'<svg[^>]*class="chart"', html)
    line = html[html.index('class="verdict-line"'):html.index("</p>", html.index('class="verdict-line"'))]
    assert "bench mlp: bf16: 2.50× fp32" in line and "bench mlp: fp16: error" in line
    assert f"({framework})" in html  # the section's title names the framework that ran


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_parity_and_audit_html_name_every_mode_and_layer(framework):
    parity = planted.parity(framework)._repr_html_()
    _self_contained(parity)
    table = parity[parity.index('<table class="parity-results"'):]
    assert re.findall(r"<tr><td>(\w+)</td>", table[:table.index("</table>")]) == ["fp32", "bf16"]
    assert "<svg" not in parity  # no runs recorded: no curve to draw (see the next test)
    audit = planted.audit(framework)._repr_html_()
    _self_contained(audit)
    _scoped(audit)
    layers = audit[audit.index('<table class="audit-layers"'):]
    assert re.findall(r"<td><code>([\w.]+)</code>", layers[:layers.index("</table>")]) == ["encoder.0", "boom", "head"]
    assert "First inf/NaN:" in audit and re.search(r'<svg[^>]*class="chart"', audit)


def test_parity_with_runs_draws_its_curves_inline():
    from ampkit.parity.report import RunRecord

    report = planted.parity("torch")
    for r in report.results:
        r.runs = [RunRecord(r.mode, s, [1.0, 0.5, 0.3], [0.8, 0.9, 0.95], [0.9, 0.5, 0.3], 0, 1.0) for s in r.seeds]
    html = report._repr_html_()
    assert len(re.findall(r'<svg[^>]*class="chart"', html)) == 1


def test_doctor_html_and_a_framework_all_doctor_show_each_framework():
    one = planted.doctor("torch")._repr_html_()
    table = one[one.index('<table class="doctor-modes"'):]
    assert re.findall(r"<tr><td>(\w+)</td>", table[:table.index("</table>")]) == ["fp32", "tf32", "fp16", "bf16", "fp8"]
    assert "doctor: recommended: bf16" in one
    both = DoctorSet({"torch": planted.doctor("torch"), "tensorflow": planted.doctor("tensorflow")}, planted.ENVIRONMENTS["torch"])
    html = both._repr_html_()
    assert html.count('<table class="doctor-modes"') == 2 and "doctor — torch on" in html and "doctor — tensorflow on" in html
    assert repr(both).startswith("<ampkit doctor torch on cuda:0: recommended bf16") and " | doctor tensorflow" in repr(both)


def test_two_charts_in_one_notebook_page_never_share_an_id():
    a, b = _bench("torch")._repr_html_(), _bench("torch")._repr_html_()
    ids_a, ids_b = set(re.findall(r'\bid="([^"]+)"', a)), set(re.findall(r'\bid="([^"]+)"', b))
    assert ids_a and not ids_a & ids_b


@pytest.mark.parametrize("kind", ["doctor", "bench", "parity", "audit"])
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_repr_is_one_line_under_200_characters_naming_command_subject_modes_and_verdict(kind, framework):
    text = repr(_bench(framework) if kind == "bench" else getattr(planted, kind)(framework))
    assert "\n" not in text and len(text) < 200 and text.startswith(f"<ampkit {kind} ")
    expected = {"doctor": ["recommended bf16", "fp16 slower"], "bench": ["mlp", "fp32 baseline", "bf16 2.50×", "fp16 error"],
                "parity": ["digits", "fp32 baseline", "bf16 pass"], "audit": ["mlp in fp16", "inf/NaN first in boom"]}[kind]
    for word in expected:
        assert word in text, (word, text)


def test_a_long_repr_is_cut_to_199_characters_with_an_ellipsis():
    report = planted.bench("torch")
    report.workload = "w" * 300
    text = repr(report)
    assert len(text) == 199 and text.endswith("…>")
    assert shorten("a\nb   c") == "a b c"


def test_repr_of_a_what_if_audit_and_of_a_run_stopped_before_any_mode():
    audit = planted.audit("torch")
    audit.what_if = {"fp16": {"verdict": "safe_with_scale", "first_overflow": None, "loss_scale_range": [1, 1024],
                              "keep_in_fp32": [], "advice": "", "modules": []},
                     "bf16": {"verdict": "safe", "first_overflow": None, "loss_scale_range": None, "keep_in_fp32": [],
                              "advice": "", "modules": []}}
    assert repr(audit) == "<ampkit audit --what-if mlp on cuda:0: fp16 safe_with_scale · bf16 safe>"
    assert 'class="audit-whatif"' in audit._repr_html_()
    bench = planted.bench("torch")
    bench.results, bench.interrupted = [], True
    assert repr(bench) == "<ampkit bench mlp on cuda:0: no mode finished (interrupted)>"
    assert 'data-interrupted="true"' in bench._repr_html_()


def test_a_repr_never_raises():
    report = planted.bench("torch")
    report.results = None  # broken beyond display
    assert repr(report) == "<ampkit bench (not shown: TypeError)>"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_to_pandas_gives_the_contract_keys_one_row_per_mode_or_layer(framework):
    bench = planted.bench(framework).to_pandas()
    assert BENCH_KEYS <= set(bench.columns) and list(bench["mode"]) == ["fp32", "bf16", "fp16"]
    assert bench.loc[1, "samples_per_s"] == 2500.0 and bench.loc[1, "step_ms_p50"] == 25.6
    assert set(bench["framework"]) == {framework}
    parity = planted.parity(framework).to_pandas()
    assert PARITY_KEYS <= set(parity.columns) and list(parity["mode"]) == ["fp32", "bf16"]
    assert parity.loc[1, "metric_mean"] == 0.949 and parity.loc[1, "final_loss_mean"] == 0.21
    audit = planted.audit(framework).to_pandas()
    assert LAYER_KEYS <= set(audit.columns) and list(audit["name"]) == ["encoder.0", "boom", "head"]
    assert list(audit["first_nonfinite"]) == [False, True, False] and audit.loc[1, "fwd_nonfinite"] == 12
    doctor = planted.doctor(framework).to_pandas()
    assert DOCTOR_KEYS <= set(doctor.columns) and list(doctor.loc[doctor["recommended"], "mode"]) == ["bf16"]


def test_parity_to_pandas_per_seed_has_a_row_per_run():
    from ampkit.parity.report import RunRecord

    report = planted.parity("torch")
    for r in report.results:
        r.runs = [RunRecord(r.mode, s, [0.5], [0.9 + s / 100], [0.4], 0, 1.0) for s in r.seeds]
    frame = report.to_pandas(per="seed")
    assert len(frame) == 6 and list(frame.columns[:5]) == ["dataset", "framework", "device", "mode", "seed"]
    assert math.isclose(frame.loc[5, "test_accuracy"][0], 0.92)


def test_to_pandas_per_seed_is_for_parity_only():
    from ampkit.errors import UsageError

    with pytest.raises(UsageError, match=r"per='seed' is for a parity report.*one row per layer"):
        planted.audit("torch").to_pandas(per="seed")
    with pytest.raises(UsageError, match=r"to_pandas\(per='run'\)"):
        planted.parity("torch").to_pandas(per="run")


def test_without_pandas_to_pandas_says_in_one_line_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas -> ImportError
    with pytest.raises(ModuleNotFoundError) as err:
        planted.bench("torch").to_pandas()
    message = str(err.value)
    assert "\n" not in message and INSTALL_HINT in message and message.startswith("ampkit: to_pandas() needs pandas")
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_to_json_writes_the_document_report_reads(tmp_path):
    from ampkit.report import load

    report = planted.bench("tensorflow")
    report.results[0].final_loss = float("nan")
    text = report.to_json(tmp_path / "b.json")
    back = load(str(tmp_path / "b.json"))[0].report
    assert '"final_loss": null' in text and [r.mode for r in back.results] == ["fp32", "bf16", "fp16"]
    assert back.framework == "tensorflow"


# ---------------------------------------------------------------- what a new result type gets with one line
@dataclass
class PlanLike(ResultDisplay, command="sketch"):
    """A result type of a command the notebook has no section for (shaped like a plan document)."""

    default: str
    modules: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"kind": "ampkit-plan", "version": 1, "framework": "torch", "default": self.default, "modules": self.modules}


def test_a_new_result_type_displays_generically_with_one_line_of_adoption():
    plan = PlanLike("bf16", {"encoder.*": "bf16", "head": "fp32", "LayerNorm": "fp32"})
    assert repr(plan) == "<ampkit sketch: default bf16>"  # the dataclass's own repr was replaced
    html = plan._repr_html_()
    _self_contained(html)
    _scoped(html)
    assert re.findall(r"<tr><td>([\w.*]+)</td><td>(\w+)</td></tr>", html) == [
        ("encoder.*", "bf16"), ("head", "fp32"), ("LayerNorm", "fp32")]
    assert list(plan.to_pandas().columns) == ["name", "value"] and len(plan.to_pandas()) == 3


def test_a_class_with_its_own_repr_keeps_it():
    @dataclass
    class Own(ResultDisplay, command="own"):
        x: int = 1

        def __repr__(self) -> str:
            return "mine"

        def to_dict(self) -> dict:
            return {"x": self.x}

    assert repr(Own()) == "mine"


def test_the_trainer_callbacks_record_shows_its_summary_and_audit_section():
    from render.golden_views import record  # the same failing fp16 record the goldens are drawn from

    rec = record()
    text = repr(rec)
    assert text.startswith("<ampkit test: 5 steps in fp16, 1 skipped") and "first inf/NaN: b (forward)" in text
    assert len(text) < 200
    html = rec._repr_html_()
    _self_contained(html)
    assert "test: 5 steps in fp16" in html and 'class="audit-layers"' in html and "First inf/NaN:" in html
    frame = rec.to_pandas()
    assert list(frame["name"]) == ["a", "b", "c"] and list(frame["first_nonfinite"]) == [False, True, False]


def test_a_plan_report_displays_its_section_and_a_one_line_repr():
    """issue #37 for the plan (#36): ampkit plan's report displays like the others."""
    from ampkit.plan.report import PlanReport

    doc = {"ampkit_version": "0.1.0", "command": "plan", "environment": {"framework": "torch"}, "framework": "torch",
           "workload": "m:f", "device": "cpu", "status": "none_faster",
           "plan": {"kind": "ampkit-plan", "version": 1, "framework": "torch", "default": "fp16",
                    "modules": {"attn": "fp32"}, "evidence": {}},
           "tried": [{"mode": "fp16", "plan": {"modules": {"attn": "fp32"}}, "speedup": 0.5, "speedup_ci": [0.4, 0.6],
                      "speedup_verdict": "slower", "finite": True, "parity": "equivalent", "accepted": False,
                      "why": "slower than fp32"}]}
    plan = PlanReport.from_dict(doc)
    line = repr(plan)
    assert line == "<ampkit plan m:f on cpu: fp16 (attn fp32); none_faster>" and len(line) < 200
    html = plan._repr_html_()
    _self_contained(html)
    assert 'class="plan"' in html and "<code>attn</code> in fp32" in html and "slower than fp32" in html
    frame = plan.to_pandas()
    assert list(frame["mode"]) == ["fp16"] and frame["speedup"][0] == 0.5
