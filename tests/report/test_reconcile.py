"""Issues 23 and 45: ``ampkit report`` reconciles the doctor and bench of one environment, by the
rule bench's last line uses (ampkit.bench.doctor_check). A doctor that recommends a mode bench did
not measure faster (slower, no measurable difference, fp16 slowest), or calls slower a mode bench
measured faster, gets a verdict row saying so, with bench's --explain sentences; agreeing
documents add nothing."""

from __future__ import annotations

import json

import neutral_reports as planted
from ampkit.report import build, load, markdown

WHY = ["bf16 is 0.45x fp32 here (22.00 ms vs 10.00 ms per step)",
       "casts grew most: 0.00 -> 9.00 ms per step (+9.00 ms; 41% of the bf16 step, 0% of fp32's) — dtype casts",
       "the model's largest matmul is 64x64 @ 64x64 (time-weighted size about 64) — too small to gain"]


def _docs(tmp_path, *, bf16_speedup: float, verdict: str, explanation=None, doctor_framework="torch",
          bench_framework="torch", quick=False):
    doctor = planted.doctor(doctor_framework)
    doctor.quick = quick
    doctor.modes["bf16"].speedup_by_size = {"1024": 4.0, "64": 0.8, "256": 1.6}
    bench = planted.bench(bench_framework)
    bf16 = bench.results[1]
    bf16.speedup_vs_fp32, bf16.speedup_ci, bf16.speedup_verdict = bf16_speedup, [bf16_speedup * 0.9,
                                                                                bf16_speedup * 1.1], verdict
    bf16.explanation = explanation
    paths = []
    for name, rep in (("doctor.json", doctor), ("bench.json", bench)):
        path = tmp_path / name
        path.write_text(json.dumps(rep.to_dict()))
        paths.append(path)
    return [d for p in paths for d in load(str(p))]


def _with_fp16(tmp_path, speedup, ci, verdict):
    """The planted bench with an fp16 row measured as given (bf16's row otherwise), both documents loaded."""
    bench = json.loads((tmp_path / "bench.json").read_text())
    bench["results"][2] = {**bench["results"][1], "mode": "fp16", "speedup_vs_fp32": speedup, "speedup_ci": ci,
                           "speedup_verdict": verdict}
    (tmp_path / "bench.json").write_text(json.dumps(bench))
    return load(str(tmp_path / "doctor.json")) + load(str(tmp_path / "bench.json"))


def _reconciled(docs) -> list[dict]:
    report = build(docs)
    return [row for env in report.environments for row in env.verdicts() if row["key"].startswith("doctor vs bench")]


def test_a_recommended_mode_bench_measured_slower_is_named_with_benchs_explanation(tmp_path):
    docs = _docs(tmp_path, bf16_speedup=0.45, verdict="slower", explanation=WHY)
    (row,) = _reconciled(docs)
    assert row["key"] == "doctor vs bench mlp: bf16" and row["tone"] == "bad"
    assert row["text"].startswith("they disagree: the doctor recommends bf16 (matmul/conv 3.00x, training step 3.00x "
                                  "fp32 on its own small ops on 2 threads), but bench mlp measured bf16 0.45x [0.41, 0.50] "
                                  "fp32: slower; bench's fastest: fp32; ")
    assert "bench's --explain: casts grew most: 0.00 -> 9.00 ms" in row["text"]
    assert "too small to gain" in row["text"]
    assert "the doctor's matmul gains bf16 0.80x at 64², 1.60x at 256², 4.00x at 1024²" in row["text"]
    page = markdown(build(docs))
    assert "doctor vs bench mlp: bf16" in page and "they disagree" in page


def test_without_explain_the_row_points_to_it(tmp_path):
    (row,) = _reconciled(_docs(tmp_path, bf16_speedup=0.45, verdict="slower"))
    assert row["text"].endswith("measured bf16 0.45x [0.41, 0.50] fp32: slower; bench's fastest: fp32; the doctor's "
                                "matmul gains bf16 0.80x at 64², 1.60x at 256², 4.00x at 1024²; `ampkit bench --explain` "
                                "names this workload's matmul sizes and where its step's time goes")


def test_a_mode_the_doctor_calls_slower_that_bench_measured_faster(tmp_path):
    _docs(tmp_path, bf16_speedup=2.5, verdict="faster")
    (row,) = _reconciled(_with_fp16(tmp_path, 1.8, [1.5, 2.1], "faster"))
    assert row["key"] == "doctor vs bench mlp: fp16"
    assert row["text"].startswith("they disagree: the doctor calls fp16 slower (matmul/conv 0.50x, training step 0.50x "
                                  "fp32 on its own small ops on 2 threads), but bench mlp measured fp16 faster: 1.80x "
                                  "[1.50, 2.10] fp32")


def test_agreeing_documents_add_nothing(tmp_path):
    docs = _docs(tmp_path, bf16_speedup=2.5, verdict="faster", explanation=WHY)
    assert _reconciled(docs) == []
    assert "doctor vs bench" not in markdown(build(docs))
    # no measurable difference is: the doctor's recommendation claimed a gain bench did not see (#45 point 6)
    (row,) = _reconciled(_docs(tmp_path, bf16_speedup=0.98, verdict="no measurable difference"))
    assert "measured bf16 0.98x [0.88, 1.08] fp32: no measurable difference; bench's fastest: fp32" in row["text"]


def test_a_doctor_recommending_fp16_beside_a_bench_where_fp16_is_slowest(tmp_path):
    _docs(tmp_path, bf16_speedup=1.02, verdict="no measurable difference")
    doctor = json.loads((tmp_path / "doctor.json").read_text())
    doctor["recommended"] = "fp16"
    doctor["modes"]["fp16"].update(verdict="recommended", speedup=2.5, training_speedup=1.3)
    (tmp_path / "doctor.json").write_text(json.dumps(doctor))
    docs = _with_fp16(tmp_path, 0.97, [0.90, 1.03], "no measurable difference")
    (row,) = _reconciled(docs)
    assert row["key"] == "doctor vs bench mlp: fp16"
    assert row["text"].startswith("they disagree: the doctor recommends fp16 (matmul/conv 2.50x, training step 1.30x")
    assert "bench's fastest: bf16 1.02x [0.92, 1.12] fp32" in row["text"]
    page = markdown(build(docs))
    assert "doctor vs bench mlp: fp16" in page and "they disagree: the doctor recommends fp16" in page


def test_other_frameworks_and_quick_doctors_are_not_compared(tmp_path):
    docs = _docs(tmp_path, bf16_speedup=0.45, verdict="slower", quick=True)
    assert _reconciled(docs) == []
    # a TF doctor and a torch bench sit in different environments: never compared
    docs = _docs(tmp_path, bf16_speedup=0.45, verdict="slower", doctor_framework="tensorflow")
    assert _reconciled(docs) == []


def test_the_page_shows_benchs_explanation_and_its_stacked_bar(tmp_path):
    docs = _docs(tmp_path, bf16_speedup=2.5, verdict="faster", explanation=WHY)
    page = markdown(build(docs))
    assert "**why bf16** (--explain): bf16 is 0.45x fp32 here" in page
    bench = json.loads((tmp_path / "bench.json").read_text())
    bench["results"][1]["breakdown"] = {"matmul_conv": 0.5, "casts": 0.5}
    (tmp_path / "bench.json").write_text(json.dumps(bench))
    from ampkit.report import html

    page = html(build(load(str(tmp_path / "bench.json"))))
    assert "why bf16 (--explain):" in page and "the step by category (--explain)" in page
    assert "step by category (ms)" in page  # the stacked bar's panel, in the inline chart
