"""Issue 45: bench times the modes in interleaved rounds and pairs them per round, as the doctor
does. The pairing logic on planted timings (exact answers), and the round order the driver runs,
read from what each mode's child recorded."""

from __future__ import annotations

import io

import pytest

from ampkit.bench import driver
from ampkit.bench.config import BenchConfig
from ampkit.bench.repeats import fold
from ampkit.bench.report import BenchRow, derive_relative
from ampkit.bench.rounds import (
    load_change,
    paired_ratios,
    paired_speedup,
    plan_rounds,
    process_sets,
    round_order,
    round_pace,
    split_plan,
    split_rounds,
)
from ampkit.registry import _REGISTERED
from ampkit.stats import median_interval, paired_estimate


def test_the_steps_are_spread_over_at_most_ten_rounds_of_two_steps_or_more():
    assert plan_rounds(25) == [3, 3, 3, 3, 3, 2, 2, 2, 2, 2]
    assert plan_rounds(20) == [2] * 10 and plan_rounds(7) == [3, 2, 2] and plan_rounds(4) == [2, 2]
    assert plan_rounds(3) == [1, 1, 1] and plan_rounds(1) == [1] and plan_rounds(0) == []
    assert sum(plan_rounds(1001)) == 1001 and len(plan_rounds(1001)) == 10
    assert round_order(["fp32", "bf16", "fp16"], 0) == ["fp32", "bf16", "fp16"]
    assert round_order(["fp32", "bf16", "fp16"], 1) == ["fp16", "bf16", "fp32"]


def test_a_round_is_the_fastest_step_of_its_block_and_a_cut_block_is_not_a_round():
    assert split_rounds([1.0, 3.0, 2.0, 9.0, 5.0], [2, 2, 1]) == [1.0, 2.0, 5.0]
    assert split_rounds([3.0, 1.0, 2.0], [2, 2]) == [1.0]  # the second block has one of its two steps


def _rows(fp32_ms, bf16_ms, batch=8):
    rows = []
    for mode, ms in (("fp32", fp32_ms), ("bf16", bf16_ms)):
        steps = [t for t in ms if t is not None]
        rows.append(BenchRow(mode, batch_size=batch, samples_per_s=batch / (sorted(steps)[len(steps) // 2] / 1e3),
                             step_ms={"p50": sorted(steps)[len(steps) // 2]}, step_times_ms=list(steps),
                             round_ms=list(ms), rounds=len(ms), final_loss=1.0, steps=len(steps)))
    return rows


def test_a_load_that_comes_and_goes_cancels_in_the_paired_ratio():
    """Every other round twice as slow for both modes (a job on, off): each round's ratio is exactly
    2, so the speedup is 2.00x [2.00, 2.00] "faster"; the sequential statistic (median step ratio)
    is not even defined the same way, and the load check names the rounds."""
    fp32, bf16 = [100.0, 200.0, 100.0, 200.0, 100.0, 200.0], [50.0, 100.0, 50.0, 100.0, 50.0, 100.0]
    assert paired_ratios(fp32, bf16) == [2.0] * 6
    est = paired_speedup(fp32, bf16)
    assert (est.point, est.low, est.high, est.n) == (2.0, 2.0, 2.0, 6)
    base, mode = _rows(fp32, bf16)
    derive_relative([base, mode])
    assert mode.speedup_vs_fp32 == 2.0 and mode.speedup_ci == [2.0, 2.0] and mode.speedup_verdict == "faster"
    assert "6 interleaved rounds" in mode.speedup_note and base.speedup_verdict == "baseline"
    assert round_pace({"fp32": fp32, "bf16": bf16}) == pytest.approx([2 ** -0.5, 2 ** 0.5] * 3)
    change = load_change({"fp32": fp32, "bf16": bf16})
    assert change["spread"] == 2.0 and (change["slowest_round"], change["fastest_round"]) == (2, 1)
    assert change["line"].startswith("the machine's load changed during the run: round 2 ran 2.0x slower than round 1")
    assert "rerun on an idle machine" in change["line"]


def test_the_interval_is_the_order_statistics_of_the_per_round_ratios():
    fp32 = [100.0, 100.0, 100.0, 100.0, 100.0]
    bf16 = [100.0, 80.0, 110.0, 90.0, 100.0]
    ratios = [1.0, 1.25, 100 / 110, 100 / 90, 1.0]
    assert paired_ratios(fp32, bf16) == pytest.approx(ratios)
    assert paired_speedup(fp32, bf16) == paired_estimate(paired_ratios(fp32, bf16))
    base, mode = _rows(fp32, bf16)
    derive_relative([base, mode])
    est = paired_estimate(ratios)
    assert est.ci == [round(100 / 110, 4), 1.25]  # five rounds: the whole range
    assert mode.speedup_vs_fp32 == est.point == 1.0 and mode.speedup_ci == est.ci
    assert mode.speedup_verdict == "no measurable difference"
    assert load_change({"fp32": fp32, "bf16": bf16}) is None  # 1.10 / 0.91: within the spread allowed


def test_batches_unfinished_rounds_and_repeats_pair_round_by_round():
    assert paired_ratios([100.0, 100.0, 100.0], [25.0, 50.0, None], base_batch=8, mode_batch=16) == [8.0, 4.0]
    assert load_change({"fp32": [100.0, 300.0], "bf16": [50.0, 150.0]}) is None  # two rounds: not judged
    runs = {m: [r for r in rows] for m, rows in zip(("fp32", "bf16"), zip(_rows([100.0, 100.0], [50.0, 50.0]),
                                                                          _rows([200.0, 200.0], [100.0, 50.0])))}
    rows = fold(runs, ["fp32", "bf16"], 2)
    assert rows[1].round_ms == [50.0, 50.0, 100.0, 50.0] and rows[1].rounds == 4
    derive_relative(rows, runs)
    assert rows[1].speedup_vs_fp32 == 2.0  # median of 2, 2, 2, 4 (pooled rounds, each with fp32's of its round)


@pytest.fixture()
def ordered(monkeypatch, tmp_path):
    monkeypatch.setitem(_REGISTERED, "order", "order_backend:OrderBackend")
    path = tmp_path / "order.txt"
    monkeypatch.setenv("AMPKIT_TEST_ORDER", str(path))
    return path


def test_the_driver_runs_every_mode_in_its_own_live_child_in_alternating_rounds(ordered):
    report = driver.run(BenchConfig(workload="tiny", modes="fp32,bf16,tf32", steps=7, warmup=2), "order")
    lines = ordered.read_text().split("\n")[:-1]
    warm, timed = lines[:3], lines[3:]
    assert sorted(warm) == ["bf16 warmup 2", "fp32 warmup 2", "tf32 warmup 2"]
    expect = [f"{m} timed {n}" for r, n in enumerate([3, 2, 2]) for m in round_order(["fp32", "bf16", "tf32"], r)]
    assert timed == expect
    assert report.pairing == "interleaved" and report.to_dict()["pairing"] == "interleaved"
    rows = {r.mode: r for r in report.results}
    assert [rows[m].rounds for m in rows] == [3, 3, 3] and len(rows["bf16"].round_ms) == 3
    assert len(rows["bf16"].step_times_ms) == 7 and rows["bf16"].round_ms[0] == min(rows["bf16"].step_times_ms[:3])
    assert rows["bf16"].speedup_vs_fp32 > 1 and "interleaved rounds" in rows["bf16"].speedup_note  # sleeps half as long


def test_a_mode_that_fails_mid_run_leaves_the_rounds_to_the_others(ordered, monkeypatch):
    """bf16 fails in its third step: round 2 of the first set of processes (4 rounds of 2 steps, two
    sets, warm-up 0); the others finish all four rounds and bf16 is not started again in the second set."""
    monkeypatch.setenv("AMPKIT_TEST_FAIL_AT", "3")
    seen = []
    report = driver.run(BenchConfig(workload="tiny", modes="fp32,bf16,tf32", steps=8, warmup=0), "order",
                        on_row=seen.append)
    rows = {r.mode: r for r in report.results}
    assert rows["bf16"].status == "error" and "planted failure at step 3" in rows["bf16"].error
    assert rows["fp32"].rounds == rows["tf32"].rounds == 4 and rows["tf32"].status == "ok"
    assert rows["tf32"].processes == 2 and rows["bf16"].steps == 4  # the set it failed in: 2 rounds of 2
    timed = ordered.read_text().split("\n")[:-1]
    assert timed.count("bf16 timed 2") == 1 and timed.count("tf32 timed 2") == 4
    assert sorted(r.mode for r in seen) == ["bf16", "fp32", "tf32"]  # each mode's row told once


def test_on_a_cpu_the_rounds_are_split_over_two_sets_of_fresh_processes(ordered, monkeypatch, tmp_path):
    """Issue #45: one process's rounds cannot see how much a fresh process of the same mode differs,
    so a CPU run's rounds are split over two sets of processes, one after the other: every mode is
    opened (and warmed up) in two processes, the second set's order reversed; the rows pool both sets'
    rounds in order, each paired with fp32's round of the same set."""
    pids = tmp_path / "pids.txt"
    monkeypatch.setenv("AMPKIT_TEST_PIDS", str(pids))
    starts = []
    report = driver.run(BenchConfig(workload="tiny", modes="fp32,bf16", steps=10, warmup=1), "order",
                        progress=lambda m: starts.append(m) if m.get("kind") == "start" else None)
    lines = ordered.read_text().split("\n")[:-1]
    first = lines[:2] + [f"{m} timed 2" for r in range(3) for m in round_order(["fp32", "bf16"], r)]
    second = [f"{m} timed 2" for r in range(2) for m in round_order(["bf16", "fp32"], r)]
    assert sorted(lines[:2]) == ["bf16 warmup 1", "fp32 warmup 1"] and lines[:8] == first
    assert sorted(lines[8:10]) == ["bf16 warmup 1", "fp32 warmup 1"] and lines[10:] == second
    opened = [ln.split() for ln in pids.read_text().split("\n")[:-1]]
    assert len(opened) == 4 and len({pid for _, pid in opened}) == 4  # four processes, two per mode
    assert [(m["mode"], m["set"], m["sets"], m["steps"], m["interleaved"]) for m in starts] == \
        [("fp32", 1, 2, 6, True), ("bf16", 1, 2, 6, True), ("bf16", 2, 2, 4, True), ("fp32", 2, 2, 4, True)]
    rows = {r.mode: r for r in report.results}
    assert [(rows[m].rounds, rows[m].processes, rows[m].steps, len(rows[m].step_times_ms)) for m in rows] == \
        [(5, 2, 10, 10)] * 2
    assert rows["bf16"].round_ms == [min(rows["bf16"].step_times_ms[i:i + 2]) for i in range(0, 10, 2)]
    assert rows["bf16"].speedup_vs_fp32 > 1 and report.config["steps"] == 10
    assert process_sets(5, accelerator=False) == 2 and process_sets(5, accelerator=True) == 1
    assert process_sets(6, accelerator=False) == process_sets(10, accelerator=False) == 3
    assert process_sets(3, accelerator=False) == 1 and process_sets(10, accelerator=False, repeats=2) == 1
    assert process_sets(10, accelerator=False, modes=1) == 1  # no speedup to pair


def test_a_mode_alone_is_not_said_to_be_interleaved_with_other_modes(ordered):
    from ampkit.cli.common import ProgressLines

    out, starts = io.StringIO(), []
    lines = ProgressLines("bench", warmup=1, stream=out)
    driver.run(BenchConfig(workload="tiny", modes="fp32", steps=4, warmup=1), "order",
               progress=lambda m: (starts.append(m), lines(m)) if m.get("kind") == "start" else None)
    assert [m["interleaved"] for m in starts] == [False]
    assert out.getvalue().splitlines() == ["ampkit bench: fp32: starting in a fresh process: 1 warm-up + 4 timed steps"]


def test_sets_fold_their_steps_and_skips_and_the_load_check_stays_inside_each_set():
    """Three sets of a CPU run (4, 3, 3 rounds): an ok row's timed and skipped steps are every set's
    together, so fp16 whose loss scaler skipped every timed step of every set is flagged, not given a
    speedup; a failed row keeps its own set's. The load check judges each set's rounds apart: the
    second set's processes all 20% slower is no load change (a fresh process's own pace), a round 2.5x
    slower inside the third set is, named by its number in the run."""
    from ampkit.bench.driver import _load_change
    from ampkit.bench.judge import ALL_SKIPPED

    def run(mode, ms, skipped=0, status="ok"):
        r = _rows(ms, ms)[0]
        r.mode, r.skipped_steps, r.status = mode, skipped, status
        r.steps, r.step_times_ms = 2 * len(ms), [t for t in ms for _ in (0, 1)]
        return r

    fp32 = [[10.0] * 4, [12.0] * 3, [10.0, 25.0, 10.0]]
    fp16 = [[20.0] * 4, [24.0] * 3, [20.0, 50.0, 20.0]]
    runs = {"fp32": [run("fp32", ms) for ms in fp32], "fp16": [run("fp16", ms, 2 * len(ms)) for ms in fp16]}
    rows = fold(runs, ["fp32", "fp16"], 1, sets=3)
    assert [(r.steps, r.skipped_steps, r.processes, r.rounds_per_process) for r in rows] == \
        [(20, 0, 3, [4, 3, 3]), (20, 20, 3, [4, 3, 3])]
    derive_relative(rows)
    assert rows[1].flags == [ALL_SKIPPED] and rows[1].speedup_vs_fp32 is None
    change = _load_change(rows)
    assert (change["slowest_round"], change["fastest_round"], change["spread"]) == (9, 8, 2.5)
    assert "round 9 ran 2.5x slower than round 8" in change["line"]
    calm = fold({m: [run(m, [t] * 3) for t in ts] for m, ts in (("fp32", (10.0, 12.0, 10.0)), ("fp16", (20.0, 24.0, 20.0)))},
                ["fp32", "fp16"], 1, sets=3)
    assert _load_change(calm) is None  # 10, 12, 10 ms a round: the sets differ, no round inside one does
    assert load_change({"fp32": calm[0].round_ms, "fp16": calm[1].round_ms}, spread=1.15) is not None  # pooled: a "change"
    failed = fold({"fp16": [run("fp16", [20.0] * 4, 8, status="error")]}, ["fp16"], 1, sets=3)[0]
    assert (failed.steps, failed.skipped_steps, failed.status) == (8, 8, "error")


def test_a_later_set_runs_the_modes_still_ok_so_each_times_the_steps_asked():
    """fp32 fails in the first set: bf16 still runs the later sets (its row times every step asked for,
    not a third of them); a mode that failed is not started again."""
    from ampkit.bench.runner import run_modes

    calls = []

    def interleaved(modes, k):
        calls.append((k, list(modes)))
        return {m: (BenchRow(m, status="error", error="planted") if m == "fp32"
                    else BenchRow(m, status="ok", round_ms=[1.0, 1.0], rounds=2, steps=4)) for m in modes}, False

    rows, _ = run_modes(["fp32", "bf16"], 1, None, steps=12, interleaved=interleaved, sets=3)
    assert calls == [(0, ["fp32", "bf16"]), (1, ["bf16"]), (2, ["bf16"])]
    assert [(r.mode, r.status, r.steps) for r in rows] == [("fp32", "error", None), ("bf16", "ok", 12)]
    calls.clear()
    run_modes(["fp32", "bf16", "fp16"], 1, None, steps=12, sets=3,
              interleaved=lambda modes, k: calls.append(list(modes)) or (
                  {m: BenchRow(m, status="error" if (m == "fp16" and k == 0) else "ok", round_ms=[1.0] * 2,
                               rounds=2, steps=4) for m in modes}, False))
    assert calls == [["fp32", "bf16", "fp16"], ["bf16", "fp32"], ["fp32", "bf16"]]


def test_the_plan_splits_into_consecutive_sets_the_longer_first():
    assert split_plan([2] * 5, 2) == [[2, 2, 2], [2, 2]]
    assert split_plan([2] * 10, 3) == [[2] * 4, [2] * 3, [2] * 3]
    assert split_plan([3, 3, 2, 2], 2) == [[3, 3], [2, 2]]
    assert split_plan([2] * 10, 1) == [[2] * 10]
    assert split_plan([1], 2) == [[1]]  # never an empty set
    assert sum(split_plan(plan_rounds(25), 2), []) == plan_rounds(25)


def test_batch_size_auto_runs_the_modes_one_after_another_and_says_so(ordered):
    report = driver.run(BenchConfig(workload="small", modes="fp32,bf16", memory_budget=50_000, steps=2, warmup=0),
                        "order")
    assert report.pairing == "sequential" and all(r.round_ms == [] for r in report.results)


def test_the_median_interval_is_the_binomial_order_statistics():
    """The order statistics x(k), x(n+1-k): the whole range below six values, x(1)..x(6) at six (P=1/64
    each side), x(2)..x(9) at ten, x(6)..x(15) at twenty (P(B<6)=2.1% <= 2.5% < P(B<7)=5.8%);
    unsorted input; one value: none."""
    assert median_interval([5.0]) is None
    assert median_interval([3.0, 1.0]) == (1.0, 3.0)
    assert median_interval([5.0, 1.0, 4.0, 2.0, 3.0]) == (1.0, 5.0)
    assert median_interval(range(1, 7)) == (1.0, 6.0)
    assert median_interval(list(range(10, 0, -1))) == (2.0, 9.0)
    assert median_interval(range(1, 21)) == (6.0, 15.0)
    assert median_interval(range(1, 21), confidence=0.5) == (8.0, 13.0)  # P(B<8)=13.2% <= 25% < P(B<9)=25.2%


def test_the_median_interval_holds_its_coverage_where_the_bootstrap_falls_short():
    """Planted rounds from a skewed distribution whose median is known: over 400 seeded runs of ten
    rounds, the order-statistic interval holds the true median at least 95% of the time (it is exact:
    97.9% at n=10); the doctor's bootstrap of the same rounds holds it less often."""
    import math
    import random

    from ampkit.stats import ratio_estimate

    rng = random.Random(7)
    true_median = math.exp(0.0)  # lognormal(0, 0.3) has median 1
    held = boot = 0
    for _ in range(400):
        xs = [math.exp(rng.gauss(0.0, 0.3)) for _ in range(10)]
        est = paired_estimate(xs)
        held += est.low <= true_median <= est.high
        b = ratio_estimate(xs, resamples=400)
        boot += b.low <= true_median <= b.high
    assert held / 400 >= 0.95 and held > boot, (held, boot)
