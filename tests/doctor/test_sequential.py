"""Sequential rounds (issue #41) on planted timings, no clock: each mode leaves as soon as the interval
rule decides it at the Bonferroni-corrected confidence, the rest run to the cap, and the verdicts are
the non-sequential rule's on the same data."""

from __future__ import annotations

import subprocess
import sys

import pytest
from test_verdicts_planted import make_work_for

from ampkit import rounds
from ampkit.doctor.verdicts import ACCEL_THRESHOLD, evaluate
from ampkit.rounds import Plan, Work, round_ratios, run_rounds
from ampkit.rounds_sequential import (
    ACCELERATED,
    NO_DIFFERENCE,
    corrected_agrees,
    corrected_confidence,
    interval,
    mode_decision,
    planned_looks,
    settle,
)
from ampkit.stats import CONFIDENCE, FASTER, SLOWER, Estimate, classify, ratio_estimate

T = ACCEL_THRESHOLD


class _Op:
    def __init__(self, mode: str, name: str, calls: list):
        self.mode, self.name, self.calls = mode, name, calls

    def __call__(self):
        self.calls.append((self.mode, self.name))


def scripted(per_round: dict, calls: list | None = None):
    """Work whose clock reads planted seconds: ``per_round[mode][op]`` is a list cycled over the
    readings of that op (the first reading is the warm-up's calibration)."""
    calls = [] if calls is None else calls
    seen: dict = {}

    class Clock:
        def sync(self):
            pass

        def time(self, fn, reps):
            key = (fn.mode, fn.name)
            i = seen[key] = seen.get(key, -1) + 1
            xs = per_round[fn.mode][fn.name]
            return [xs[i % len(xs)]] * reps

    def work_for(mode):
        ops = per_round[mode]
        return Work({n: (_Op(mode, n, calls), None) for n in ("matmul", "conv") if n in ops},
                    {n: (_Op(mode, n, calls), None) for n in ("train",) if n in ops}, Clock())
    return work_for


FLAT = {"matmul": [0.01], "conv": [0.01], "train": [0.01]}


# ---------------------------------------------------------------- the correction
def test_the_confidence_is_bonferroni_over_the_planned_looks():
    assert planned_looks(3, 9, screen=True) == 8 and planned_looks(3, 9, screen=False) == 7
    assert corrected_confidence(8) == pytest.approx(1 - 0.05 / 8)
    assert corrected_confidence(1) == pytest.approx(CONFIDENCE)


def test_the_correction_matters_a_95_percent_look_would_decide_where_the_corrected_one_does_not():
    ratios = [1.5] * 6 + [1.0]  # one disturbed round among seven
    assert classify(ratio_estimate(ratios), T) == FASTER  # the 95% interval alone says accelerated
    assert settle(interval(ratios, corrected_confidence(8)), T) is None  # corrected: not yet decided
    assert corrected_agrees(ratios, T, corrected_confidence(8))


def test_run_rounds_looks_at_the_corrected_confidence(monkeypatch):
    seen = []
    real = rounds.mode_decision
    monkeypatch.setattr(rounds, "mode_decision", lambda k, t, thr, conf: seen.append(conf) or real(k, t, thr, conf))
    run_rounds(["fp32", "bf16"], scripted({"fp32": FLAT, "bf16": FLAT}), Plan(min_rounds=3, max_rounds=9), threshold=T)
    assert seen and seen == [pytest.approx(1 - 0.05 / 8)] * len(seen)  # 7 looks after rounds 3..9, and the screen's


# ---------------------------------------------------------------- stopping
def test_a_clearly_slower_mode_stops_after_the_screen_and_its_other_ops_never_run():
    calls: list = []
    slow = {"matmul": [0.5], "conv": [0.5], "train": [0.5]}  # 50x slower than fp32
    series = run_rounds(["fp32", "fp16", "bf16"], scripted({"fp32": FLAT, "fp16": slow, "bf16": FLAT}, calls),
                        Plan(min_rounds=3, max_rounds=9), threshold=T)
    fp16 = series["fp16"]
    assert fp16.stopped == "decided: slower" and fp16.screened == "matmul" and len(fp16.rounds) == 2
    assert {name for mode, name in calls if mode == "fp16"} == {"matmul"}  # conv and training never warmed up
    assert round_ratios(series["fp32"], fp16, "kernels") == pytest.approx([0.02, 0.02])  # paired with the screen's fp32
    assert series["bf16"].stopped == f"decided: {NO_DIFFERENCE}" and len(series["bf16"].rounds) == 3


def test_an_undecided_mode_runs_to_the_cap():
    # ratios alternate 1.0 and 1.25 for ever: the interval always reaches across 1.10
    wobbly = {"matmul": [0.01, 0.01, 0.008], "conv": [0.01, 0.01, 0.008], "train": [0.01, 0.01, 0.008]}
    series = run_rounds(["fp32", "bf16"], scripted({"fp32": FLAT, "bf16": wobbly}), Plan(min_rounds=3, max_rounds=7,
                        budget_s=1e9), threshold=T)
    assert series["bf16"].stopped == "cap" and len(series["bf16"].rounds) == 7


def test_the_time_budget_ends_undecided_rounds_after_min_rounds():
    ticks = iter(range(1000))
    wobbly = {"matmul": [0.01, 0.008], "conv": [0.01, 0.008], "train": [0.01, 0.008]}
    series = run_rounds(["fp32", "bf16"], scripted({"fp32": FLAT, "bf16": wobbly}),
                        Plan(min_rounds=5, max_rounds=9, budget_s=2.5), threshold=T, now=lambda: 10 * next(ticks))
    assert series["bf16"].stopped == "cap: time budget" and len(series["bf16"].rounds) == 5


def test_an_accelerated_mode_stops_once_decided_and_says_so():
    fast = {"matmul": [0.005], "conv": [0.005], "train": [0.006]}
    series = run_rounds(["fp32", "bf16"], scripted({"fp32": FLAT, "bf16": fast}), Plan(min_rounds=3, max_rounds=9),
                        threshold=T)
    assert series["bf16"].stopped == f"decided: {ACCELERATED}" and len(series["bf16"].rounds) == 3


def test_an_accelerated_mode_waits_while_a_rival_it_may_be_compared_with_is_undecided():
    fast = {"matmul": [0.005], "conv": [0.005], "train": [0.006]}
    # fp16: faster kernels, a training step that wobbles around bf16's: the pair cannot be told apart yet
    rival = {"matmul": [0.005], "conv": [0.005], "train": [0.006, 0.006, 0.0045]}
    series = run_rounds(["fp32", "fp16", "bf16"], scripted({"fp32": FLAT, "fp16": rival, "bf16": fast}),
                        Plan(min_rounds=3, max_rounds=6, budget_s=1e9), threshold=T)
    assert series["fp16"].stopped == "cap" and series["bf16"].stopped == "cap"  # bf16 stayed for the comparison
    assert len(series["bf16"].rounds) == 6


def test_kernels_faster_but_a_training_step_within_the_band_is_undecided():
    kernels, training = [2.0, 2.1, 1.9], [1.06, 1.05, 1.07]  # the recommendation reads this step's median
    conf = corrected_confidence(8)
    assert mode_decision(kernels, training, T, conf) is None
    assert mode_decision(kernels, [1.5, 1.6, 1.55], T, conf) == ACCELERATED
    assert mode_decision([0.5, 0.4, 0.45], [1.5, 1.6, 1.55], T, conf) == SLOWER
    assert mode_decision([1.0, 1.01, 0.99], [1.5, 1.6, 1.55], T, conf) == NO_DIFFERENCE


# ---------------------------------------------------------------- the same verdicts as without stopping
def _verdicts(speed, plan, seed):
    reports, recommended, _ = evaluate(["fp32", "fp16", "bf16"], lambda m: (True, "planted"), lambda m: ("pass", ""),
                                       make_work_for(speed, noise=0.05, seed=seed), quick=False, plan=plan)
    return {m: (r.verdict, r.accelerated) for m, r in reports.items()}, recommended, reports


@pytest.mark.parametrize("speed", [
    {"fp16": (0.02, 0.05), "bf16": (1.6, 1.4)},    # emulated fp16, fast bf16 (this project's AMD EPYC)
    {"fp16": (0.3, 0.2), "bf16": (0.5, 0.6)},      # both emulated (an AVX2-only CPU)
    {"fp16": (1.8, 1.5), "bf16": (1.6, 1.4)},      # both fast, fp16 not told apart from bf16
    {"fp16": (1.0, 1.0), "bf16": (1.0, 1.0)},      # nothing gained
])
def test_sequential_verdicts_equal_the_full_rounds_verdicts(speed):
    for seed in range(3):
        seq, rec_seq, reports = _verdicts(speed, Plan(max_rounds=9, budget_s=1e9), seed)
        full, rec_full, _ = _verdicts(speed, Plan(max_rounds=9, budget_s=1e9, sequential=False), seed)
        assert seq == full and rec_seq == rec_full, (speed, seed)
        for mode in ("fp16", "bf16"):  # and each is the 95% rule applied to the rounds it measured
            r = reports[mode]
            want = classify(Estimate(r.speedup, *r.speedup_ci, r.rounds), T)
            assert r.accelerated == (want == FASTER) and r.stopped.startswith(("decided", "cap"))


def test_the_document_says_how_many_rounds_and_why_each_mode_stopped():
    reports, _, _ = evaluate(["fp32", "fp16", "bf16"], lambda m: (True, ""), lambda m: ("pass", ""),
                             make_work_for({"fp16": (0.05, 0.05), "bf16": (1.6, 1.5)}, noise=0.02), quick=False,
                             plan=Plan(max_rounds=9), sizes=(64,))
    fp16, bf16 = reports["fp16"].to_dict(), reports["bf16"].to_dict()
    assert (fp16["stopped"], fp16["rounds"]) == ("decided: slower", 2)
    assert fp16["training_speedup"] is None and "decided on the matmul alone" in fp16["reason"]
    assert "no size table" in fp16["reason"]  # a slower mode cannot be recommended: no size table for it
    assert bf16["stopped"] == "decided: accelerated" and 3 <= bf16["rounds"] < 9
    assert reports["fp32"].stopped == "baseline"


# ---------------------------------------------------------------- nothing heavy imported
def test_the_quick_doctor_imports_neither_dynamo_nor_torchao(tmp_path):
    code = ("import sys; from ampkit.doctor import run_doctor; r = run_doctor('torch', 'cpu', quick=True); "
            "heavy = [m for m in ('torch._dynamo', 'torchao', 'torch.distributed.fsdp', 'sympy') if m in sys.modules]; "
            "print(heavy, r.modes['fp8'].emulated, r.modes['fp16'].selftest)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**__import__("os").environ, "AMPKIT_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    heavy, emulated, fp16 = r.stdout.strip().rsplit(" ", 2)
    assert heavy == "[]" and fp16 == "pass"


def test_a_mode_without_the_screen_op_skips_the_screen_and_is_measured():
    """TensorFlow's fp8 has no kernel to time (Keras float8 training steps only): the screen passes it by."""
    only_training = {"train": [0.005]}
    series = run_rounds(["fp32", "fp8", "fp16"], scripted({"fp32": FLAT, "fp8": only_training, "fp16": FLAT}),
                        Plan(max_rounds=5), threshold=T)
    fp8 = series["fp8"]
    assert fp8.error is None and fp8.screened is None and len(fp8.rounds) >= 3
    assert round_ratios(series["fp32"], fp8, "training") == pytest.approx([2.0] * len(fp8.rounds))


def test_the_screen_sends_off_only_a_many_times_slower_mode():
    """Two rounds of one op on a loaded machine can read a fast mode as 0.7x: the screen needs the
    corrected interval below SCREEN_DROP (0.5), the main rounds decide the rest."""
    calls: list = []
    mild = {"matmul": [0.014], "conv": [0.014], "train": [0.014]}  # 0.71x: slower, but not many times
    series = run_rounds(["fp32", "bf16"], scripted({"fp32": FLAT, "bf16": mild}, calls), Plan(max_rounds=9),
                        threshold=T)
    bf16 = series["bf16"]
    assert bf16.screened is None and bf16.stopped == "decided: slower" and len(bf16.rounds) == 3
    assert {name for mode, name in calls if mode == "bf16"} == {"matmul", "conv", "train"}


class _LateOp(_Op):
    builds_on_first_call = True  # a traced training step (TensorFlow): built on its first call


def test_costly_training_steps_wait_for_a_kernel_look_and_a_slower_mode_never_builds_them(monkeypatch):
    """Where training steps are built on first call (seconds each), a mode the screen saw slower but not
    many times slower (TensorFlow's fp16 here: 0.5-0.8x) runs first_look rounds of its kernels alone;
    slower on them at the corrected confidence, it leaves without building its training steps. The
    kernel look is one more planned look: the correction counts it."""
    calls: list = []
    base = scripted({"fp32": FLAT, "fp16": {"matmul": [0.014], "conv": [0.014], "train": [0.014]},
                     "bf16": {"matmul": [0.005], "conv": [0.005], "train": [0.006]}}, calls)

    def work_for(mode):
        w = base(mode)
        w.training = {n: (_LateOp(mode, n, calls), fl) for n, (_, fl) in w.training.items()}
        return w
    seen = []
    real = rounds.mode_decision
    monkeypatch.setattr(rounds, "mode_decision", lambda k, t, thr, conf: seen.append(conf) or real(k, t, thr, conf))
    series = run_rounds(["fp32", "fp16", "bf16"], work_for, Plan(max_rounds=9), threshold=T)
    fp16, bf16 = series["fp16"], series["bf16"]
    assert fp16.stopped == "decided: slower" and fp16.screened == rounds.KERNELS_ALONE and len(fp16.rounds) == 3
    assert {name for mode, name in calls if mode == "fp16"} == {"matmul", "conv"}  # training never built
    assert round_ratios(series["fp32"], fp16, "kernels") == pytest.approx([1 / 1.4] * 3)
    assert bf16.stopped == f"decided: {ACCELERATED}" and "train" in {n for m, n in calls if m == "bf16"}
    assert seen and seen == [pytest.approx(1 - 0.05 / 9)] * len(seen)  # screen, kernel look, rounds 3..9
    reports, _, _ = evaluate(["fp32", "fp16", "bf16"], lambda m: (True, ""), lambda m: ("pass", ""), work_for,
                             quick=False, plan=Plan(max_rounds=9))
    assert reports["fp16"].verdict == "slower" and "training steps were not timed (never built)" in reports["fp16"].reason


def test_the_screen_times_a_smaller_matmul_where_the_work_can_be_sized():
    """An emulated mode is as many times slower at 256² as at 512², for an eighth of the time: the
    screen uses Work.at_size(Plan.screen_n), and the row's matmul figures are that size's."""
    calls: list = []
    base = scripted({"fp32": FLAT, "fp16": {"matmul": [0.5], "conv": [0.5], "train": [0.5]}}, calls)
    small = scripted({"fp32": {"matmul": [0.001]}, "fp16": {"matmul": [0.05]}})

    def work_for(mode):
        w = base(mode)
        w.at_size = lambda n, mode=mode: Work({"matmul": (_Op(mode, "matmul", []), 2.0 * n**3)}, {},
                                               small(mode).clock)
        return w
    reports, _, _ = evaluate(["fp32", "fp16"], lambda m: (True, ""), lambda m: ("pass", ""), work_for, quick=False,
                             plan=Plan(max_rounds=9))
    fp16 = reports["fp16"]
    assert fp16.verdict == "slower" and fp16.speedup == pytest.approx(0.02) and fp16.rounds == 2
    assert "matmul (256²) 50.0x slower" in fp16.reason and "decided on the matmul (256²) alone" in fp16.reason
    assert fp16.benchmark["matmul"]["tflops"] == pytest.approx(2.0 * 256**3 / 0.05 / 1e12)
    assert fp16.benchmark["matmul"]["speedup"] == pytest.approx(0.02)  # paired with the screen's fp32
    assert ("fp16", "matmul") not in calls  # the 512² matmul of the main work never ran


def test_on_an_accelerator_the_screen_times_the_main_matmul():
    """A 256² matmul is launch-bound on a GPU (an emulated mode would look no slower there): the
    accelerator plan screens on the main op even where the Work can be sized."""
    from ampkit.doctor.driver import ACCELERATOR_PLAN

    calls: list = []
    base = scripted({"fp32": FLAT, "fp16": {"matmul": [0.5], "conv": [0.5], "train": [0.5]}}, calls)

    def work_for(mode):
        w = base(mode)
        w.at_size = lambda n: pytest.fail("the accelerator's screen sized a Work")
        return w
    reports, _, _ = evaluate(["fp32", "fp16"], lambda m: (True, ""), lambda m: ("pass", ""), work_for, quick=False,
                             plan=ACCELERATOR_PLAN)
    assert ACCELERATOR_PLAN.screen_n is None and Plan().screen_n == 256
    assert "decided on the matmul alone" in reports["fp16"].reason and ("fp16", "matmul") in calls
