"""Issue 20: bench says what went wrong, how sure a speedup is, and claims none it cannot back.

Planted models (tests/bench/planted_models.py) fail in fp16 in one known way each; the modes run
in this process through the same ``run_mode`` the bench's children call (milliseconds a step),
except for the end-to-end CLI runs at the bottom.
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys

import pytest

from ampkit.bench import judge
from ampkit.bench.config import BenchConfig
from ampkit.bench.repeats import fold
from ampkit.bench.report import BenchReport, BenchRow, derive_relative

HERE = os.path.dirname(os.path.abspath(__file__))


def _run(model: str, modes=("fp32", "fp16"), steps=3, warmup=2) -> dict[str, BenchRow]:
    from ampkit.bench.ops import MeasureRequest
    from ampkit.bench.session import measure_mode
    from ampkit.registry import get_backend

    backend = get_backend("torch")
    cfg = BenchConfig(model=model, modes=list(modes), steps=steps, warmup=warmup, device="cpu")
    rows = [measure_mode(backend, MeasureRequest(cfg, m, backend.target("cpu")), None) for m in cfg.modes]
    derive_relative(rows)
    return {r.mode: r for r in rows}


def _table(rows, steps=3, warmup=2, repeats=1) -> str:
    from rich.console import Console

    from ampkit.render import bench as render_bench

    report = BenchReport(workload="planted", device="cpu", results=list(rows), environment={"framework": "torch"},
                         config={"steps": steps, "warmup": warmup, "repeats": repeats})
    buf = io.StringIO()
    render_bench.render(report, Console(file=buf, width=200, color_system=None))
    return buf.getvalue()


def _reference_skips(steps: int) -> list[bool]:
    """Which of the first ``steps`` steps a hand-written torch.amp loop (GradScaler) skips on the
    warmup_overflow model: the reference the bench's count must match."""
    import planted_models
    import torch

    torch.manual_seed(0)
    wl = planted_models.warmup_overflow()
    batch = wl.make_batch(wl.batch_size, torch.device("cpu"), torch.Generator().manual_seed(1))
    opt = torch.optim.AdamW(wl.model.parameters(), lr=wl.lr)
    scaler = torch.amp.GradScaler("cpu")
    skipped = []
    for _ in range(steps):
        with torch.autocast("cpu", dtype=torch.float16):
            loss = wl.loss(batch)
        scaler.scale(loss).backward()
        before = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        skipped.append(scaler.get_scale() < before)
        opt.zero_grad()
    return skipped


# ---------------------------------------------------------------- 1. warm-up skips counted
def test_warmup_skips_are_counted_apart_from_the_timed_steps():
    reference = _reference_skips(11)
    first_clean = reference.index(False)
    assert first_clean >= 1 and not any(reference[first_clean:]), reference  # the plant: skips only at first
    warmup = first_clean + 1
    rows = _run("planted_models:warmup_overflow", steps=3, warmup=warmup)
    fp16 = rows["fp16"]
    assert fp16.status == "ok", fp16.error
    assert fp16.warmup_skipped_steps == sum(reference[:warmup]) == first_clean
    assert fp16.skipped_steps == 0 and fp16.warmup == warmup
    assert rows["fp32"].warmup_skipped_steps == 0
    assert fp16.to_dict()["warmup_skipped_steps"] == first_clean  # a row key
    assert f"{first_clean} of {warmup}" in _table(rows.values(), warmup=warmup)


def test_without_warmup_the_same_skips_land_in_the_timed_steps():
    first_clean = _reference_skips(11).index(False)
    fp16 = _run("planted_models:warmup_overflow", modes=("fp16",), steps=first_clean + 2, warmup=0)["fp16"]
    assert fp16.skipped_steps == first_clean and fp16.warmup_skipped_steps == 0


# ---------------------------------------------------------------- 2. a diverged loss: flagged, no speedup
def test_a_mode_whose_loss_diverges_is_flagged_and_claims_no_speedup():
    rows = _run("planted_models:diverges")
    fp32, fp16 = rows["fp32"], rows["fp16"]
    assert fp32.final_loss == pytest.approx(0.0625, rel=0.01) and fp16.final_loss == pytest.approx(0.1225, rel=0.01)
    assert fp16.status == "ok" and fp16.skipped_steps == 0
    assert fp16.flags == [judge.DIVERGED] and "25%" in fp16.warning
    assert fp16.speedup_vs_fp32 is None and fp16.speedup_ci is None and "diverged" in fp16.speedup_note
    assert fp16.samples_per_s > 0  # the times are kept, only the claim is withheld
    assert fp32.flags == [] and fp32.speedup_vs_fp32 == 1.0
    text = _table(rows.values())
    assert "loss diverged" in text and "none claimed" in text and "flagged, no speedup claimed" in text


def test_divergence_rule():
    assert judge.divergence(1.05, 1.0, 2.3) is None                  # 5%: the same training
    assert "differs by 139%" in judge.divergence(2.79, 1.05, 2.3)    # the user's resnet18 (of fp32's progress 1.25)
    assert judge.divergence(0.002, 0.0005, 2.3) is None               # fp32 near 0: judged against its progress
    assert judge.divergence(0.497, 0.280, 2.904) is None              # both near 0 after 3 steps: the same progress
    assert judge.divergence(0.9, 0.0005, 2.3) is not None              # a third of the progress lost
    assert judge.divergence(2.5, 0.28, 2.9) is not None                # fp32 trains, the mode does not
    assert judge.divergence(float("nan"), 1.0, 2.0) is None           # non-finite: an error row already
    assert judge.divergence(1.3, 1.0, None) is not None and judge.divergence(1.2, 1.0, None) is None


def test_different_batch_sizes_are_not_compared_for_divergence():
    base = BenchRow("fp32", batch_size=8, samples_per_s=100.0, step_ms={"p50": 80.0}, final_loss=1.0, steps=3)
    other = BenchRow("bf16", batch_size=16, samples_per_s=150.0, step_ms={"p50": 106.7}, final_loss=3.0, steps=3)
    derive_relative([base, other])
    assert other.flags == [] and other.speedup_vs_fp32 == pytest.approx(1.5)


# ---------------------------------------------------------------- 2b. every timed step skipped
def test_a_mode_whose_timed_steps_were_all_skipped_is_flagged_and_claims_no_speedup():
    rows = _run("planted_models:always_overflow")
    fp16 = rows["fp16"]
    assert fp16.status == "ok" and fp16.skipped_steps == 3 and fp16.warmup_skipped_steps == 2
    assert fp16.flags == [judge.ALL_SKIPPED] and "all 3 timed steps" in fp16.warning
    assert fp16.speedup_vs_fp32 is None and fp16.speedup_ci is None
    assert rows["fp32"].flags == [] and rows["fp32"].skipped_steps == 0
    assert "all steps skipped" in _table(rows.values())


# ---------------------------------------------------------------- 3. one definition of speedup, an interval for one run
def _row(mode, step_ms, batch=8):
    from ampkit.bench.rows import fill_timing

    r = BenchRow(mode, steps=len(step_ms), final_loss=1.0)
    fill_timing(r, batch, [t / 1e3 for t in step_ms], None, False)
    return r


def test_one_run_speedup_is_the_samples_per_s_ratio_with_a_bootstrap_interval():
    fp32 = _row("fp32", [100, 102, 98, 101, 99, 100, 103, 97])
    fast = _row("bf16", [50, 51, 49, 50, 52, 48, 50, 51])
    same = _row("fp16", [99, 104, 96, 101, 100, 98, 102, 103])
    derive_relative([fp32, fast, same])
    for r in (fast, same):
        assert r.speedup_vs_fp32 == pytest.approx(r.samples_per_s / fp32.samples_per_s, rel=1e-12)
        assert r.samples_per_s == pytest.approx(8 / (r.step_ms["p50"] / 1e3), rel=1e-12)  # batch / median step
        low, high = r.speedup_ci
        assert low <= r.speedup_vs_fp32 <= high
    assert fast.speedup_verdict == "faster" and fast.speedup_ci[0] > 1.9
    assert same.speedup_verdict == "no measurable difference" and same.speedup_ci[0] < 1 < same.speedup_ci[1]
    text = _table([fp32, fast, same], steps=8)
    assert "no measurable difference" in text and "faster" in text
    assert "samples/s ÷ fp32's samples/s" in text and "bootstrap over this run's timed steps" in text


def test_interval_reads_the_doctors_threshold():
    est = judge.steps_speedup([100.0] * 5 + [101.0] * 5, 8, [95.0] * 5 + [96.0] * 5, 8)
    assert 1.0 < est.low and est.high < 1.10
    assert judge.words(est) == "small difference"  # measurable, but within 1.10x: neither faster nor slower
    assert judge.steps_speedup([100.0], 8, [50.0], 8).low is None  # one step: no interval


def test_repeats_speedup_equals_the_samples_per_s_ratio_in_the_same_table():
    """The user's case: the median of the per-repeat ratios (0.53) is not the ratio of the medians of
    samples/s the table shows (0.45); the speedup is now the latter, by the one definition."""
    def rows(mode, sps):
        return [BenchRow(mode, batch_size=8, samples_per_s=s, step_ms={"p50": 8e3 / s, "p90": 9e3 / s},
                         peak_memory_bytes=1000, final_loss=0.5, steps=3) for s in sps]

    runs = {"fp32": rows("fp32", [100, 150, 60]), "fp16": rows("fp16", [53, 45, 40])}
    per_repeat = sorted(m.samples_per_s / b.samples_per_s for m, b in zip(runs["fp16"], runs["fp32"]))
    assert per_repeat[1] == pytest.approx(0.53)
    folded = fold(runs, ["fp32", "fp16"], 3)
    derive_relative(folded, runs)
    fp32, fp16 = folded
    assert fp16.samples_per_s == 45 and fp32.samples_per_s == 100
    assert fp16.speedup_vs_fp32 == pytest.approx(fp16.samples_per_s / fp32.samples_per_s) == pytest.approx(0.45)
    low, high = fp16.speedup_ci
    assert low <= fp16.speedup_vs_fp32 <= high
    assert "over the repeats" in " ".join(_table(folded, repeats=3).split())


def test_folded_samples_per_s_and_step_time_agree_for_an_even_number_of_repeats():
    runs = {"fp32": [BenchRow("fp32", batch_size=8, samples_per_s=s, step_ms={"p50": 8e3 / s}, steps=2)
                     for s in (100, 200)]}
    (row,) = fold(runs, ["fp32"], 2)
    assert row.samples_per_s * row.step_ms["p50"] / 1e3 == pytest.approx(8)


# ---------------------------------------------------------------- CLI: progress, stdout pure JSON
def test_cli_progress_lines_on_stderr_json_alone_on_stdout():
    r = subprocess.run([sys.executable, "-m", "ampkit", "bench", "--framework", "torch", "--device", "cpu",
                        "--model", "planted_models:always_overflow", "--modes", "fp32,fp16", "--steps", "4",
                        "--warmup", "2", "--json", "-"], capture_output=True, text=True, timeout=600, cwd=HERE)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)  # stdout is the document and nothing else
    rows = {row["mode"]: row for row in doc["results"]}
    assert rows["fp16"]["flags"] == ["all_timed_steps_skipped"] and rows["fp16"]["speedup_vs_fp32"] is None
    assert rows["fp16"]["warmup_skipped_steps"] == 2 and rows["fp16"]["skipped_steps"] == 4
    assert doc["speedup_definition"].startswith("speedup_vs_fp32 = samples_per_s / fp32's")
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("ampkit bench: ")]
    for mode in ("fp32", "fp16"):
        mine = [ln for ln in lines if ln.startswith(f"ampkit bench: {mode}: ")]
        assert "starting in a fresh process: 2 warm-up + 4 timed steps" in mine[0], lines
        assert any("warm-up done (2 steps)" in ln for ln in mine) and "all 6 steps done" in mine[-1], mine
        assert len(mine) <= 8  # a line per group of steps, not a flood
    assert "skipped in warm-up" in r.stderr and "all steps skipped" in r.stderr  # the table (stderr with --json -)


def test_progress_lines_are_grouped(monkeypatch):
    from ampkit.cli.common import ProgressLines

    out, now = io.StringIO(), [0.0]
    lines = ProgressLines("bench", warmup=5, stream=out, every_s=30.0, clock=lambda: now[0])
    lines({"mode": "fp16", "kind": "start", "repeat": 1, "repeats": 1, "steps": 100})
    for done in range(1, 106):
        now[0] += 0.1
        lines({"mode": "fp16", "kind": "step", "done": done, "total": 105})
    text = out.getvalue().splitlines()
    assert text[0] == "ampkit bench: fp16: starting in a fresh process: 5 warm-up + 100 timed steps"
    assert [ln.split(": ", 2)[2].split(" (")[0] for ln in text[1:]] == [
        "step 1/105 done", "warm-up done", "timed step 25/100", "timed step 50/100", "timed step 75/100",
        "all 105 steps done"]
    now[0] += 31  # a slow step still says where it is
    lines({"mode": "fp16", "kind": "step", "done": 3, "total": 105})
    assert out.getvalue().splitlines()[-1].startswith("ampkit bench: fp16: step 3/105")
    # a CPU run's rounds split over two sets of processes (ampkit.bench.rounds.process_sets): each start says which
    lines({"mode": "bf16", "kind": "start", "steps": 6, "interleaved": True, "set": 2, "sets": 2})
    assert out.getvalue().splitlines()[-1] == ("ampkit bench: bf16 (process set 2 of 2): starting in a fresh process: "
                                               "5 warm-up + 6 timed steps, timed in rounds interleaved with the other modes")


# ---------------------------------------------------------------- Keras: every timed step skipped
@pytest.mark.tensorflow
def test_keras_mode_whose_timed_steps_were_all_skipped_is_flagged():
    r = subprocess.run([sys.executable, "-m", "ampkit", "bench", "--framework", "tensorflow", "--device", "cpu",
                        "--model", "keras_planted:always_overflow", "--modes", "fp32,fp16", "--steps", "3",
                        "--warmup", "1", "--json", "-"], capture_output=True, text=True, timeout=900, cwd=HERE)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = {row["mode"]: row for row in json.loads(r.stdout)["results"]}
    fp16 = rows["fp16"]
    assert fp16["status"] == "ok" and fp16["skipped_steps"] == 3 and fp16["warmup_skipped_steps"] == 1
    assert fp16["flags"] == ["all_timed_steps_skipped"] and fp16["speedup_vs_fp32"] is None
    assert rows["fp32"]["flags"] == [] and rows["fp32"]["speedup_vs_fp32"] == 1.0
    assert math.isfinite(fp16["final_loss"])


def test_an_error_row_whose_every_timed_step_was_skipped_carries_the_flag():
    base = BenchRow("fp32", batch_size=8, samples_per_s=100.0, step_ms={"p50": 80.0}, final_loss=1.0, steps=5)
    nan = BenchRow("fp16", status="error", error="loss is nan after 7 steps", batch_size=8, skipped_steps=5, steps=5)
    derive_relative([base, nan])
    assert nan.flags == [judge.ALL_SKIPPED] and nan.speedup_vs_fp32 is None


def test_library_bench_reads_a_keras_models_classes_by_default():
    import inspect

    import ampkit

    assert inspect.signature(ampkit.bench).parameters["num_classes"].default is None


# ---------------------------------------------------------------- the audit command for a mode that overflowed
def _report(rows, framework="torch", width=400, **config):
    from rich.console import Console

    from ampkit.render import bench as render_bench

    report = BenchReport(workload=config.get("model") or config.get("workload"), device="cpu", results=list(rows),
                         environment={"framework": framework},
                         config={"steps": 3, "warmup": 1, "repeats": 1, "device": "auto", **config})
    buf = io.StringIO()
    render_bench.render(report, Console(file=buf, width=width, color_system=None))
    return [ln.strip() for ln in buf.getvalue().splitlines() if "to find where" in ln or "fp32's loss" in ln]


def _failed(mode, error="loss is nan after 4 steps (3 of 3 timed steps skipped by the loss scaler)"):
    return BenchRow(mode, status="error", error=error, steps=3)


def test_a_mode_whose_loss_went_nan_ends_with_the_audit_command_on_the_same_model():
    fp32 = _row("fp32", [10, 10, 10])
    rows = [fp32, _failed("fp16"), _failed("plan:fp16"), _failed("bf16", "boom: a RuntimeError")]
    lines = _report(rows, model="my_models:net", input_shape=[6, 8], num_classes=4, workload="mlp", device="cpu")
    # plain fp16 only (the plan's mode would be audited without its plan); bf16 failed for another reason
    command = ("ampkit audit --model my_models:net --input-shape 6,8 --num-classes 4 --device cpu --mode fp16")
    assert lines == [f"to find where fp16 first overflows: {command}"]
    # an 80-column terminal: the command is still one line (a wrapped one pastes as two commands)
    assert _report(rows, width=80, model="my_models:net", input_shape=[6, 8], num_classes=4, device="cpu") == lines
    flagged = _row("fp16", [12, 12, 12])
    flagged.flags = [judge.ALL_SKIPPED]
    assert _report([fp32, flagged], workload="bert-base", seq_len=64) == [
        "to find where fp16 first overflows: ampkit audit --workload bert-base --seq-len 64 --mode fp16"]
    assert _report([fp32, _failed("fp16")], framework="tensorflow", model="k m:f") == [
        "to find where fp16 first overflows: ampkit audit --framework tensorflow --model 'k m:f' --mode fp16"]
    assert _report([fp32, _row("fp16", [9, 9, 9])], workload="mlp") == []  # nothing failed
    assert _report([fp32, _failed("plan:fp16")], workload="mlp") == []  # the plan's mode alone


def test_when_fp32_went_nan_too_bench_blames_no_precision():
    lines = _report([_failed("fp32", "loss is nan after 4 steps"), _failed("fp16"), _failed("bf16", "loss is nan after 4 steps")],
                    workload="mlp")
    assert lines == ["fp32's loss went inf/NaN: the run diverges in float32, which no precision mode mends"]
