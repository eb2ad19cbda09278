"""Issue 45 point 4: bench reconciles with the doctor's cached verdict as the report page does.

The rule (ampkit.bench.doctor_check) on planted rows, and the whole CLI on the plain backend
(``plain_backend.py``: on its ``slowbf16`` workload bf16 really sleeps three times longer than
fp32) beside a planted doctor cache that recommends bf16: the last line names both and why."""

from __future__ import annotations

import pytest

from ampkit import auto_cache
from ampkit.bench.doctor_check import disagreements
from ampkit.cli.main import main
from ampkit.registry import _REGISTERED

DOCTOR = {"recommended": "bf16", "source": "doctor", "threads": 1, "measured_at": "2026-12-01T10:00:00+00:00",
          "modes": {"fp32": {"verdict": "usable", "speedup": 1.0, "training_speedup": 1.0},
                    "bf16": {"verdict": "recommended", "speedup": 2.74, "training_speedup": 1.25,
                             "speedup_by_size": {"64": 0.67, "256": 2.17, "1024": 2.21}},
                    "fp16": {"verdict": "slower", "speedup": 0.02, "training_speedup": 0.31}}}


def _row(mode, speedup, ci, verdict, **kw):
    return {"mode": mode, "status": "ok", "flags": [], "speedup": speedup, "speedup_ci": ci, "speedup_verdict": verdict,
            "explanation": None, "matmuls": None, **kw}


FP32 = _row("fp32", 1.0, [1.0, 1.0], "baseline")


def test_a_recommended_mode_bench_measured_slower_is_named_with_both_figures_and_the_size_table():
    (text,) = disagreements(DOCTOR, [FP32, _row("bf16", 0.45, [0.40, 0.52], "slower")], "mlp", threads=1)
    assert text.startswith("the doctor recommends bf16 (matmul/conv 2.74x, training step 1.25x fp32 on its own small "
                           "ops on 1 thread), but bench mlp measured bf16 0.45x [0.40, 0.52] fp32: slower; "
                           "bench's fastest: fp32; ")
    assert "the doctor's matmul gains bf16 0.67x at 64², 2.17x at 256², 2.21x at 1024²" in text
    assert "--explain" in text and "thread" not in text.split("; ", 2)[2]  # same count: no thread reason


def test_agreement_adds_nothing_and_no_measurable_difference_is_not_agreement():
    assert disagreements(DOCTOR, [FP32, _row("bf16", 1.9, [1.7, 2.1], "faster")], "mlp") == []
    (text,) = disagreements(DOCTOR, [FP32, _row("bf16", 0.92, [0.80, 1.05], "no measurable difference")], "mlp")
    assert "measured bf16 0.92x [0.80, 1.05] fp32: no measurable difference; bench's fastest: fp32" in text
    assert disagreements(None, [FP32, _row("bf16", 0.5, [0.4, 0.6], "slower")], "mlp") == []


def test_fp16_recommended_beside_a_bench_where_fp16_is_slowest():
    doctor = {**DOCTOR, "recommended": "fp16", "modes": {**DOCTOR["modes"], "fp16": {"verdict": "recommended",
                                                                                      "speedup": 3.1, "training_speedup": 1.4}}}
    rows = [FP32, _row("fp16", 0.97, [0.90, 1.04], "no measurable difference"), _row("bf16", 1.02, [0.95, 1.08],
                                                                                      "no measurable difference")]
    (text,) = disagreements(doctor, rows, "cnn")
    assert text.startswith("the doctor recommends fp16 (matmul/conv 3.10x, training step 1.40x fp32")
    assert "bench's fastest: bf16 1.02x [0.95, 1.08] fp32" in text


def test_fp32_recommended_and_a_faster_mode_the_thread_counts_and_explain_categories():
    doctor = {**DOCTOR, "recommended": "fp32", "modes": {**DOCTOR["modes"], "bf16": {"verdict": "usable", "speedup": 1.3,
                                                                                      "training_speedup": 1.01}}}
    explained = ["bf16 is 1.60x fp32 here", "casts: dtype casts add 0.40 ms (9% of the step)",
                 "matmul_conv: matmuls/convolutions run 2.10x faster (3.00 -> 1.43 ms) and were 60% of the fp32 step"]
    matmuls = [{"m": 256, "n": 256, "k": 256, "ms": 1.0, "calls": 4}]
    (text,) = disagreements(doctor, [FP32, _row("bf16", 1.6, [1.4, 1.8], "faster", explanation=explained, matmuls=matmuls)],
                            "mlp", threads=2)
    assert text.startswith("the doctor recommends fp32 (bf16: matmul/conv 1.30x, training step 1.01x fp32 on its own small "
                           "ops on 1 thread), but bench mlp measured bf16 faster: 1.60x [1.40, 1.80] fp32; ")
    assert "the doctor timed on 1 thread, this bench on 2 threads (--threads)" in text
    assert "bench's --explain: casts: dtype casts add 0.40 ms" in text and "run `ampkit bench --explain`" not in text


def test_a_mode_the_doctor_calls_slower_measured_faster():
    (text,) = disagreements(DOCTOR, [FP32, _row("bf16", 1.5, [1.3, 1.7], "faster"), _row("fp16", 1.4, [1.2, 1.6], "faster")],
                            "gpt2")
    assert text.startswith("the doctor calls fp16 slower (matmul/conv 0.020x, training step 0.31x fp32")


@pytest.fixture()
def plain_cache(monkeypatch, tmp_path):
    monkeypatch.setitem(_REGISTERED, "plain", "plain_backend:PlainBackend")
    monkeypatch.setenv(auto_cache.ENV_VAR, str(tmp_path))
    from plain_backend import FINGERPRINT

    return auto_cache.fingerprint(*FINGERPRINT)


def test_bench_ends_with_the_line_when_the_cached_doctor_recommends_bf16_and_bf16_measures_slower(plain_cache, capsys):
    assert auto_cache.store(plain_cache, {k: v for k, v in DOCTOR.items()}) is not None
    code = main(["bench", "--framework", "plain", "--workload", "slowbf16", "--modes", "fp32,bf16", "--batch-size", "640", "--steps", "8",
                 "--warmup", "1", "--json", "-"])
    out, err = capsys.readouterr()
    assert code == 0, err
    import json

    doc = json.loads(out)
    rows = {r["mode"]: r for r in doc["results"]}
    assert rows["bf16"]["speedup_verdict"] == "slower", rows["bf16"]  # measured: it really sleeps 3x longer
    check = doc["doctor_check"]
    assert check["recommended"] == "bf16" and check["threads"] == 1 and check["measured_at"].startswith("2026-12-01")
    (line,) = check["disagreements"]
    assert "the doctor recommends bf16" in line and "bench slowbf16 measured bf16" in line
    flat = " ".join(err.split())  # the console folds a long line
    assert flat.endswith("doctor vs bench: " + " ".join(line.split())), err[-600:]  # the last thing bench prints


def test_bench_says_nothing_when_they_agree_or_no_doctor_is_cached(plain_cache, capsys):
    # 30 ms fp32 steps (bf16 sleeps half as long): wide enough apart for the interval on a loaded machine
    code = main(["bench", "--framework", "plain", "--workload", "tiny", "--modes", "fp32,bf16", "--batch-size", "1920",
                 "--steps", "12", "--warmup", "1", "--json", "-"])
    out, err = capsys.readouterr()
    assert code == 0 and '"doctor_check": null' in out and "doctor vs bench" not in err
    auto_cache.store(plain_cache, dict(DOCTOR))
    code = main(["bench", "--framework", "plain", "--workload", "tiny", "--modes", "fp32,bf16", "--batch-size", "1920",
                 "--steps", "12", "--warmup", "1"])
    out, err = capsys.readouterr()
    assert code == 0 and "doctor vs bench" not in out + err  # bf16 2x faster here: they agree


def test_the_size_reason_reads_the_doctors_table_at_the_workloads_matmul_size():
    (text,) = disagreements(DOCTOR, [FP32, _row("bf16", 0.45, [0.40, 0.52], "slower")], "mlp", matmul_size=70.0)
    assert ("size: this workload's matmuls are about 70 (time-weighted), where the doctor measured bf16 0.67x at 64² "
            "(its table: 0.67x at 64², 2.17x at 256², 2.21x at 1024²)") in text
    assert "--explain" in text  # the categories are not measured without it


def test_the_torch_probe_records_the_workloads_matmuls_at_its_batch():
    import torch

    from ampkit.backends.torch.workloads import build_workload
    from ampkit.backends.torch.workloads.flops import matmul_shapes
    from ampkit.bench.doctor_check import matmul_size

    mlp = build_workload("mlp", None, None, None, torch.device("cpu"), seed=0)  # 784-1024-1024-10
    shapes = matmul_shapes(mlp, 64)
    assert shapes[0] == {"m": 64, "n": 1024, "k": 1024, "calls": 2}  # forward and input-gradient of the middle layer
    assert {"m": 64, "n": 1024, "k": 784, "calls": 1} in shapes
    assert 200 < matmul_size([{"matmuls": shapes}]) < 700  # between the doctor's 256² and 1024²: sizes it measures
