"""parity's statistics on constructed differences: the TOST equivalence verdict (against published
values and scipy), the seeds it asks for, the three-way non-inferiority decision, degenerate cases.

The textbook numbers are pingouin's documented examples, themselves checked against R's
``equivalence::tost`` and ``t.test`` (pingouin tests/test_equivalence.py, test_parametric.py).
"""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from scipy import stats as sps

from ampkit.parity.core import summarize
from ampkit.parity.report import RunRecord
from ampkit.stats import paired_decision, seeds_to_decide, tost

A = [4, 7, 8, 6, 3, 2]
B = [6, 8, 7, 10, 11, 9]


def test_paired_tost_matches_the_published_example():
    """pingouin: tost(a, b, bound=0.5, paired=True) -> p 0.954854 (upper 0.954854, lower 0.019138)."""
    eq = tost([a - b for a, b in zip(A, B)], 0.5)
    assert eq.p_value == pytest.approx(0.954854, abs=1e-6)
    assert eq.verdict == "not_equivalent" and eq.ci[1] < -0.5 and eq.seeds_needed is None


def test_one_sample_tost_and_its_90_percent_interval_match_r():
    """R: t.test(a, conf.level=0.90) -> [3.053, 6.947]; pingouin tost(a, y=0, bound=4) -> p 0.825967."""
    eq = tost(A, 4)
    assert eq.ci == pytest.approx((3.0532783, 6.9467217), abs=1e-6)
    assert eq.p_value == pytest.approx(0.825967, abs=1e-6)
    assert eq.verdict == "inconclusive"  # the interval straddles +4


def test_tost_p_is_the_larger_one_sided_scipy_p_and_agrees_with_the_interval():
    rng = np.random.default_rng(0)
    for _ in range(40):
        n = int(rng.integers(2, 12))
        diffs = list(rng.normal(rng.normal(0, 0.01), rng.uniform(0.001, 0.02), n))
        margin = float(rng.uniform(0.002, 0.03))
        eq = tost(diffs, margin)
        lo = sps.ttest_1samp(diffs, -margin, alternative="greater").pvalue
        hi = sps.ttest_1samp(diffs, margin, alternative="less").pvalue
        assert eq.p_value == pytest.approx(max(lo, hi), rel=1e-9)
        ci = sps.ttest_1samp(diffs, 0).confidence_interval(0.90)
        assert eq.ci == pytest.approx((ci.low, ci.high), rel=1e-9)
        assert (eq.verdict == "equivalent") == (eq.p_value < 0.05)  # TOST at alpha == the 90% interval inside


def test_clean_mode_two_seeds_inconclusive_then_the_seeds_it_asks_for_decide():
    """A clean mode over 2 seeds: the interval is wider than the margin -> inconclusive with
    seeds_needed; the same mean and spread over that many seeds -> equivalent; one fewer does not."""
    two = [0.004, -0.003]
    eq = tost(two, 0.01)
    assert eq.verdict == "inconclusive" and eq.ci[0] < -0.01 < 0.01 < eq.ci[1]
    n = eq.seeds_needed
    assert isinstance(n, int) and 3 <= n <= 50
    mean, sd = statistics.fmean(two), statistics.stdev(two)

    def sample(k):  # k values with exactly this mean and standard deviation
        z = np.linspace(-1, 1, k)
        z = (z - z.mean()) / z.std(ddof=1)
        return list(mean + sd * z)

    assert tost(sample(n), 0.01).verdict == "equivalent"
    assert tost(sample(n - 1), 0.01).verdict == "inconclusive"
    half = sps.t.ppf(0.95, n - 1) * sd / math.sqrt(n)
    assert half < 0.01 - abs(mean) <= sps.t.ppf(0.95, n - 2) * sd / math.sqrt(n - 1)


def test_seeds_needed_toward_not_equivalent_and_never():
    assert tost([-0.05, -0.02], 0.01).verdict == "inconclusive"
    n = tost([-0.05, -0.02], 0.01).seeds_needed
    assert n and tost(list(np.resize([-0.05, -0.02], n)), 0.01).verdict == "not_equivalent"
    assert seeds_to_decide(0.01, 0.004, 0.01) is None  # the mean on the bound: no number of seeds decides
    assert seeds_to_decide(0.0, 0.0, 0.01) is None


def test_degenerate_cases_say_so_instead_of_p_0():
    same = tost([0.002, 0.002, 0.002], 0.01)
    assert same.degenerate == "no variance" and same.p_value is None and same.verdict == "equivalent"
    assert same.ci == (0.002, 0.002)
    assert tost([0.02, 0.02], 0.01).verdict == "not_equivalent"
    one = tost([0.001], 0.01)
    assert one.degenerate == "one seed" and one.verdict == "inconclusive" and one.ci is None
    dec = paired_decision([-0.003, -0.003], 0.01)
    assert dec.degenerate == "no variance" and dec.p_value is None and dec.verdict == "pass"


def test_three_way_decision():
    assert paired_decision([-0.05, -0.052, -0.049, -0.051], 0.01).verdict == "fail"
    assert paired_decision([0.001, -0.001, 0.0005, 0.0], 0.01).verdict == "pass"
    assert paired_decision([0.03, -0.03], 0.01).verdict == "inconclusive"


def _run(mode, seed, acc, loss=0.5):
    return RunRecord(mode, seed, [1.0, loss], [0.5, acc], [1.0, loss], 0, 0.1)


def test_summarize_reports_both_verdicts_in_words_and_counts_nonfinite_seeds():
    base = [0.90, 0.92, 0.91]
    records = [_run("fp32", s, a) for s, a in enumerate(base)]
    records += [_run("bf16", s, a + d) for s, (a, d) in enumerate(zip(base, [0.03, -0.02, 0.0]))]
    records += [_run("fp16", 0, 0.2, float("nan")), _run("fp16", 1, 0.9), _run("fp16", 2, 0.2, float("inf"))]
    fp32, bf16, fp16 = summarize(records, ["fp32", "bf16", "fp16"], 0.01)
    assert fp32.equivalence is None and fp32.verdict == "baseline"
    assert bf16.verdict == "inconclusive" and "not proven" in bf16.reason
    assert bf16.equivalence["verdict"] == "inconclusive" and bf16.equivalence["seeds_needed"] > 3
    assert "crosses the margin ±0.01" in bf16.equivalence["reason"]
    assert fp16.verdict == "fail" and fp16.nonfinite_seeds == 2
    assert "non-finite (inf/NaN) in 2 of 3 seeds (seeds [0, 2])" in fp16.reason
    assert fp16.equivalence["verdict"] == "not_equivalent"


def test_summarize_with_a_loss_metric_reads_lower_as_better():
    records = [_run("fp32", s, 0.30 + s / 100) for s in range(3)]
    records += [_run("bf16", s, 0.40 + s / 100 + (0.001 if s == 1 else 0)) for s in range(3)]  # 0.1 higher loss: worse
    _, bf16 = summarize(records, ["fp32", "bf16"], 0.01, metric="loss", higher_is_better=False)
    assert bf16.verdict == "fail" and bf16.delta_vs_fp32 == pytest.approx(0.1, abs=1e-3)
    assert bf16.metric["name"] == "loss" and bf16.equivalence["verdict"] == "not_equivalent"


def test_the_table_and_the_report_page_show_both_verdicts_in_words(tmp_path):
    import io
    import json

    from rich.console import Console

    from ampkit.parity.report import ParityReport
    from ampkit.render.output import dumps
    from ampkit.render.parity import render
    from ampkit.report import build, load_all
    from ampkit.report.render import html, markdown

    base = [0.90, 0.92, 0.91]
    records = [_run("fp32", s, a) for s, a in enumerate(base)]
    records += [_run("bf16", s, a + d) for s, (a, d) in enumerate(zip(base, [0.03, -0.02, 0.0]))]
    records += [_run("fp16", s, a - 0.2 + d) for s, (a, d) in enumerate(zip(base, [0.001, -0.001, 0.0]))]
    report = ParityReport("custom", "cpu", summarize(records, ["fp32", "bf16", "fp16"], 0.01),
                          {"framework": "torch"}, 0.01, 2, margin=0.01)
    buf = io.StringIO()
    render(report, Console(file=buf, width=250))
    table = buf.getvalue()
    assert "inconclusive: not proven" in table and "fail: worse" in table and "not equivalent [" in table
    assert "bf16 equivalence: inconclusive: the 90% interval" in table
    path = tmp_path / "parity.json"
    path.write_text(dumps(report.to_dict()))
    again = ParityReport.from_dict(json.loads(path.read_text()))
    assert again.results[1].equivalence == report.results[1].equivalence and again.margin == 0.01
    page = build(load_all([str(path)]))
    md, page_html = markdown(page), html(page)
    for text in (md, page_html):
        assert "inconclusive: not proven" in text and "not equivalent [" in text and "fail: worse" in text
    assert "crosses the margin" in page_html


def test_progress_per_seed_and_mode_with_an_eta_and_ctrl_c_keeps_complete_seeds():
    from ampkit.parity.driver import run_seeds

    clock = {"t": 0.0}
    statuses = []

    def train_one(mode, seed, on_epoch):
        if (seed, mode) == (2, "fp16"):
            raise KeyboardInterrupt
        on_epoch(1, 1)
        return _run(mode, seed, 0.9)

    import ampkit.parity.driver as driver

    real = driver.time.perf_counter
    driver.time.perf_counter = lambda: clock.__setitem__("t", clock["t"] + 0.5) or clock["t"]  # 0.5 s per reading
    try:
        records = run_seeds(["fp32", "fp16"], [0, 1, 2], train_one, progress=lambda *a: None, on_run=statuses.append)
    finally:
        driver.time.perf_counter = real
    assert records.interrupted and sorted({(r.seed, r.mode) for r in records}) == [
        (0, "fp16"), (0, "fp32"), (1, "fp16"), (1, "fp32")]  # seed 2 had fp32 only: dropped, not paired
    first, after_one = statuses[0], statuses[1]
    assert first.eta_s is None and first.words() == "parity: seed 0 (1/3), fp32 training [run 1/6, 0:00 elapsed]"
    assert after_one.finished and after_one.eta_s is not None and after_one.eta_s > 0
    assert "about 0:0" in after_one.words() and "left" in after_one.words()
    assert [s.run for s in statuses if not s.finished] == [1, 2, 3, 4, 5, 6]


def test_a_finite_metric_is_measured_when_the_loss_went_nonfinite():
    """#34: fp16's training loss goes inf/NaN (skipped steps) but its accuracy stays finite: the
    difference and the interval are measured, the verdicts stay fail/not_equivalent, and the loss
    is named separately."""
    base = [0.672, 0.68, 0.665]
    records = [_run("fp32", s, a) for s, a in enumerate(base)]
    records += [_run("fp16", 0, 0.245, float("nan")), _run("fp16", 1, 0.25, float("inf")), _run("fp16", 2, 0.24)]
    _, fp16 = summarize(records, ["fp32", "fp16"], 0.01)
    raw = [0.245 - 0.672, 0.25 - 0.68, 0.24 - 0.665]
    assert fp16.verdict == "fail" and fp16.nonfinite_seeds == 2 and fp16.loss_nonfinite_seeds == [0, 1]
    assert fp16.delta_vs_fp32 == pytest.approx(sum(raw) / 3, abs=1e-12)
    eq = fp16.equivalence
    assert eq["verdict"] == "not_equivalent" and eq["ci"] == pytest.approx(list(tost(raw, 0.01).ci), abs=1e-12)
    assert eq["ci"][1] < -0.4 and "the training loss went non-finite in seeds [0, 1]" in fp16.reason
    assert "accuracy stayed finite: mean -0.4273 vs fp32" in fp16.reason
    assert "90% interval of the difference is [" in eq["reason"]
    # a metric that is itself non-finite, or a run that raised: nothing to measure
    records[-1] = RunRecord("fp16", 2, [1.0], [0.5, float("nan")], [1.0], 0, 0.1)
    _, fp16 = summarize(records, ["fp32", "fp16"], 0.01)
    assert fp16.delta_vs_fp32 is None and fp16.equivalence["ci"] is None and fp16.verdict == "fail"
