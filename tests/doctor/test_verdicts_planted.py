"""Doctor's decisions from planted timings (no clock): intervals, interleaving, recommendation."""

from __future__ import annotations

import random

import pytest

from ampkit.doctor.verdicts import ACCEL_THRESHOLD, evaluate, recommend
from ampkit.rounds import Plan, Series, Work, estimate, run_rounds
from ampkit.stats import FASTER, SAME, SLOWER, classify, ratio_estimate, resample_rounds

OPS = {"kernels": ("matmul", "conv"), "training": ("train_convnet", "train_transformer")}


def make_work_for(speed: dict, *, noise: float = 0.05, seed: int = 0, order: list | None = None):
    """Simpler planted work: each op is an object that knows its kind; the clock reads its speed."""
    rng = random.Random(seed)

    class Op:
        def __init__(self, mode, kind):
            self.mode, self.kind = mode, kind

        def __call__(self):
            pass

    class Clock:
        def sync(self):
            pass

        def time(self, fn, reps):
            if order is not None:
                order.append(fn.mode)
            k, t = speed.get(fn.mode, (1.0, 1.0))
            x = k if fn.kind == "kernels" else t
            return [0.010 / x * rng.lognormvariate(0, noise) for _ in range(reps)]

    def work_for(mode):
        return Work({n: (Op(mode, "kernels"), None) for n in OPS["kernels"]},
                    {n: (Op(mode, "training"), None) for n in OPS["training"]}, Clock())

    return work_for


def _doctor(speed, *, noise=0.05, seed=0, modes=("fp32", "fp16", "bf16")):
    return evaluate(list(modes), lambda m: (True, "planted"), lambda m: ("pass", "planted"),
                    make_work_for(speed, noise=noise, seed=seed), quick=False, plan=Plan(max_rounds=7))


# ---------------------------------------------------------------- the statistics
def test_interval_is_seeded_deterministic_and_contains_the_point():
    ratios = [1.5, 1.4, 1.62, 1.55, 1.3, 1.48, 1.51]
    a, b = ratio_estimate(ratios), ratio_estimate(ratios)
    assert a == b and a.low <= a.point <= a.high and a.n == 7
    assert a.point == pytest.approx(1.5)  # the median
    assert ratio_estimate([1.2]).ci is None  # one round: no interval


def test_one_disturbed_round_does_not_move_the_verdict():
    ratios = [2.0, 2.1, 1.9, 2.0, 0.6, 2.05, 1.95]  # round 5: another job took the CPU during the mode's turn
    est = ratio_estimate(ratios)
    assert classify(est, ACCEL_THRESHOLD) == FASTER and est.low > 1.8


# ---------------------------------------------------------------- doctor on planted timings
def test_equal_distributions_are_no_measurable_difference():
    reports, recommended, reason = _doctor({"fp16": (1.0, 1.0), "bf16": (1.0, 1.0)})
    for mode in ("fp16", "bf16"):
        m = reports[mode]
        assert 1 / ACCEL_THRESHOLD < m.speedup_ci[0] and m.speedup_ci[1] < ACCEL_THRESHOLD, m.speedup_ci
        assert m.accelerated is False and m.verdict == "usable"
        # decided within (1/1.10, 1.10) at the corrected confidence: no need for the cap's 7 rounds
        assert m.stopped == "decided: no measurable difference" and 3 <= m.rounds < 7
        assert "no measurable difference" in m.reason or "within the 1.10x threshold" in m.reason
    assert recommended == "fp32" and "no low-precision mode measured faster" in reason


def test_a_clear_1_5x_is_accelerated_and_recommended():
    reports, recommended, reason = _doctor({"fp16": (1.0, 1.0), "bf16": (1.5, 1.5)})
    bf16 = reports["bf16"]
    assert bf16.accelerated and bf16.speedup_ci[0] >= ACCEL_THRESHOLD
    assert bf16.speedup == pytest.approx(1.5, rel=0.08) and bf16.training_speedup_ci[0] > 1.05
    assert recommended == "bf16" and bf16.verdict == "recommended" and "1.5" in reason


def test_a_clearly_slower_mode_is_slower_and_leaves_the_rounds_early():
    reports, recommended, _ = _doctor({"fp16": (0.1, 0.05), "bf16": (1.0, 1.0)})
    fp16 = reports["fp16"]
    assert fp16.verdict == "slower" and fp16.speedup_ci[1] < 1 / ACCEL_THRESHOLD
    assert fp16.rounds == 2 and fp16.stopped == "decided: slower"  # emulated modes cost seconds per step on a CPU
    assert fp16.training_speedup is None and "not timed" in fp16.reason  # decided by the screen's matmul
    assert reports["bf16"].stopped == "decided: no measurable difference" and reports["bf16"].rounds >= 3
    assert recommended == "fp32"


def test_recommendation_does_not_flip_across_noise_draws():
    """The same machine measured twenty times (different noise each time) gives one answer."""
    answers = {_doctor({"fp16": (0.9, 0.8), "bf16": (1.5, 1.3)}, noise=0.10, seed=s)[1] for s in range(20)}
    assert answers == {"bf16"}
    answers = {_doctor({"fp16": (1.02, 1.0), "bf16": (0.98, 1.0)}, noise=0.10, seed=s)[1] for s in range(20)}
    assert answers == {"fp32"}


def test_recommendation_does_not_flip_under_resampling_of_rounds():
    series = run_rounds(["fp32", "bf16"], make_work_for({"bf16": (1.6, 1.4)}, noise=0.10, seed=3), Plan(max_rounds=7),
                        threshold=ACCEL_THRESHOLD)
    rng = random.Random(0)
    base, bf16 = series["fp32"], series["bf16"]
    for _ in range(200):
        idx = resample_rounds(len(bf16.rounds), rng)
        b = Series([(i, base.rounds[j][1]) for i, j in enumerate(idx)])
        m = Series([(i, bf16.rounds[j][1]) for i, j in enumerate(idx)])
        assert classify(estimate(b, m, "kernels"), ACCEL_THRESHOLD) == FASTER
        assert estimate(b, m, "training").low > 1


def test_rounds_are_interleaved_and_reverse_every_round():
    order: list[str] = []
    run_rounds(["fp32", "bf16", "fp16"], make_work_for({}, order=order), Plan(min_rounds=2, max_rounds=2), threshold=1.1)
    ops = len(OPS["kernels"]) + len(OPS["training"])
    # the screen: each mode's matmul warmed up (one calibration reading), then two rounds of it alone
    assert order[:3] == ["fp32", "bf16", "fp16"] and order[3:9] == ["fp32", "bf16", "fp16", "fp16", "bf16", "fp32"]
    # then the other ops warmed up, and one reading per op and round, still alternating
    rounds = order[9 + 3 * (ops - 1):]
    assert [rounds[i] for i in range(0, len(rounds), ops)] == ["fp32", "bf16", "fp16", "fp16", "bf16", "fp32"]


def test_faster_kernels_without_faster_training_are_not_recommended():
    reports, recommended, reason = _doctor({"fp16": (1.0, 1.0), "bf16": (3.0, 1.0)})
    assert reports["bf16"].accelerated and reports["bf16"].verdict == "usable"
    assert recommended == "fp32" and "training step is not 1.05x faster" in reason


def test_bf16_preferred_over_an_fp16_it_cannot_be_told_apart_from():
    reasons = []
    for seed in range(6):
        reports, recommended, reason = _doctor({"fp16": (1.55, 1.56), "bf16": (1.5, 1.5)}, noise=0.08, seed=seed)
        assert reports["fp16"].accelerated and reports["bf16"].accelerated
        assert recommended == "bf16"
        reasons.append(reason)
    # where fp16's median came out ahead, the reason says why bf16 still wins
    assert any("cannot tell the two apart" in r and "no loss scaling" in r for r in reasons)


def test_fp16_recommended_when_measurably_faster_than_bf16():
    reports, recommended, _ = _doctor({"fp16": (3.0, 2.5), "bf16": (1.5, 1.4)})
    assert recommended == "fp16"


def test_quick_measures_nothing():
    reports, recommended, reason = evaluate(["fp32", "bf16"], lambda m: (True, ""), lambda m: ("pass", ""),
                                            lambda m: pytest.fail("quick must not measure"), quick=True)
    assert reports["bf16"].speedup is None and reports["bf16"].speedup_ci is None and recommended is None  # #45 point 3
    assert recommend(reports, True)[0] is None and reason.startswith("not measured")
    assert not [m for m, r in reports.items() if r.verdict == "recommended"]


def test_classify_words():
    from ampkit.stats import Estimate

    assert classify(Estimate(1.0, 0.9, 1.1, 5), 1.1) == SAME
    assert classify(Estimate(0.5, 0.4, 0.6, 5), 1.1) == SLOWER


def test_a_kernel_only_mode_is_measured_but_never_recommended():
    """fp8: a scaled matmul is timed against fp32, but there is no fp8 training step to confirm it."""
    base = make_work_for({"fp8": (4.0, 1.0)})

    def work_for(mode):
        w = base(mode)
        if mode == "fp8":
            w.training = {}
        return w

    reports, recommended, _ = evaluate(["fp32", "fp8"], lambda m: (True, ""), lambda m: ("pass", ""), work_for,
                                       quick=False, plan=Plan(max_rounds=5))
    fp8 = reports["fp8"]
    assert fp8.accelerated and fp8.speedup_ci[0] > 3 and fp8.training_speedup is None
    assert recommended == "fp32"


def _fp8_doctor(speed, *, emulated=False, seed=0):
    """fp8 with a real training step (torchao on fp8 hardware): planted like the other modes."""
    reports, recommended, reason = evaluate(["fp32", "bf16", "fp8"], lambda m: (True, "planted"),
                                            lambda m: ("pass", "planted"), make_work_for(speed, seed=seed),
                                            quick=False, plan=Plan(max_rounds=7))
    if emulated:  # the same measurement, but the fp8 ran in emulation: recommend() must not pick it
        reports["fp8"].emulated = True
        return reports, recommend(reports, False)[0]
    return reports, recommended


def test_fp8_recommended_only_when_its_training_step_beats_bf16_by_the_interval_rule():
    # fp8 clearly faster than bf16 in training (2.4 vs 1.5): fp8
    _, rec = _fp8_doctor({"bf16": (2.0, 1.5), "fp8": (4.0, 2.4)})
    assert rec == "fp8"
    # fp8 ahead by a hair the rounds cannot confirm: bf16 (fp8 must buy more than bf16 does)
    for seed in range(4):
        reports, rec = _fp8_doctor({"bf16": (2.0, 1.5), "fp8": (4.0, 1.55)}, seed=seed)
        assert reports["fp8"].accelerated and rec == "bf16"
    # the same clear gain measured in emulation: never recommended
    _, rec = _fp8_doctor({"bf16": (2.0, 1.5), "fp8": (4.0, 2.4)}, emulated=True)
    assert rec == "bf16"
