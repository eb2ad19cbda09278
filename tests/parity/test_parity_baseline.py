"""Parity knows a baseline that did not learn (issue #46 point 3): an fp32 run at chance -- class
targets within the spread of the majority-class predictor, other targets no better than predicting
the mean -- or whose training loss did not fall makes every mode ``inconclusive``, the reason naming
the fp32 baseline; the console, the notebook's verdict rows and its one-line repr say so first.
Before: a model stuck at 0.499 on two classes got bf16 "pass; equivalent [+0, +0]"."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
import torch.nn as nn
from rich.console import Console

import ampkit
from ampkit.parity.chance import Chance, of_targets
from ampkit.parity.core import summarize
from ampkit.parity.report import RunRecord
from ampkit.render.parity import render

TWO = Chance("accuracy", 0.5, 0.05, "always predicting the majority class (2 classes in the 400 validation "
             "samples) scores 0.500, +-0.050")


def _run(mode, seed, acc, first=2.0, last=0.5):
    return RunRecord(mode, seed, [1.0, last], [acc, acc], [1.0, last], 0, 0.1, first_loss=first)


def _records(fp32, bf16):
    return [_run("fp32", s, a) for s, a in enumerate(fp32)] + [_run("bf16", s, a) for s, a in enumerate(bf16)]


# ---------------------------------------------------------------- the reference
def test_the_constant_predictor_of_class_and_regression_targets():
    c = of_targets(np.array([0] * 60 + [1] * 30 + [2] * 10), "accuracy", True)
    assert c.value == 0.6 and c.spread == pytest.approx(2 * (0.6 * 0.4 / 100) ** 0.5)
    assert "majority class (3 classes in the 100 validation samples)" in c.words
    r = of_targets(np.array([[1.0, 10.0], [3.0, 30.0]]), "loss", False)  # per output's mean: var 1 and 100
    assert r.metric == "loss" and r.value == pytest.approx((1 + 100) / 2) and r.spread == 0
    assert of_targets(np.array([1.0, 2.0]), "loss", False, default_loss=False) is None  # a custom loss: unknown
    assert of_targets(np.array([0, 1]), "custom", True) is None


# ---------------------------------------------------------------- the verdicts
def test_an_fp32_at_chance_makes_every_mode_inconclusive_naming_the_baseline():
    fp32, bf16 = summarize(_records([0.499, 0.52, 0.51], [0.499, 0.52, 0.51]), ["fp32", "bf16"], 0.01, chance=TWO)
    assert bf16.verdict == "inconclusive" and bf16.equivalence["verdict"] == "inconclusive"
    assert bf16.reason.startswith("the fp32 baseline did not learn: its accuracy (0.5097, mean of 3 seeds) is at chance")
    assert "majority class" in bf16.reason and bf16.equivalence["reason"] == bf16.reason
    assert fp32.verdict == "baseline" and "but the fp32 baseline did not learn" in fp32.reason
    # the same runs without the reference: the identical differences pass, as before
    _, plain = summarize(_records([0.499, 0.52, 0.51], [0.499, 0.52, 0.51]), ["fp32", "bf16"], 0.01)
    assert plain.verdict == "pass" and plain.equivalence["verdict"] == "equivalent"


def test_above_the_spread_is_learned_and_the_verdict_is_the_tests():
    learned = [0.56, 0.57, 0.58]  # beyond 0.5 + 0.05
    _, bf16 = summarize(_records(learned, learned), ["fp32", "bf16"], 0.01, chance=TWO)
    assert bf16.verdict == "pass" and "did not learn" not in bf16.reason


def test_a_training_loss_that_did_not_fall_is_a_baseline_that_did_not_learn():
    records = [_run("fp32", s, 0.9, first=1.0, last=1.2) for s in range(3)] + [_run("bf16", s, 0.9) for s in range(3)]
    _, bf16 = summarize(records, ["fp32", "bf16"], 0.01)  # no chance known (a custom metric): the loss tells
    assert bf16.verdict == "inconclusive" and "its training loss did not fall (first step 1, last epoch 1.2" in bf16.reason


def test_a_regression_no_better_than_the_mean_is_at_chance():
    mean = Chance("loss", 2.0, 0.0, "predicting the mean of the 64 validation targets scores a mean squared error of 2")
    records = [RunRecord(m, s, [3.0, 1.0], [2.1, 2.1], [2.1, 2.1], 0, 0.1, first_loss=3.0)
               for m in ("fp32", "fp16") for s in range(3)]
    _, fp16 = summarize(records, ["fp32", "fp16"], 0.01, metric="loss", higher_is_better=False, chance=mean)
    assert fp16.verdict == "inconclusive" and "its loss (2.1, mean of 3 seeds) is at chance" in fp16.reason


def test_a_mode_that_went_non_finite_still_fails_and_the_baseline_is_said_too():
    """A NaN loss needs no baseline to be a failure (an fp16 overflow on raw inputs fp32 had no
    time to learn): ``fail``, its reason naming the baseline as well."""
    records = _records([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])
    records[-1].train_loss[-1] = float("nan")
    _, bf16 = summarize(records, ["fp32", "bf16"], 0.01, chance=TWO)
    assert bf16.verdict == "fail" and bf16.reason.startswith("training loss or metric became non-finite")
    assert "; besides, the fp32 baseline did not learn" in bf16.reason


# ---------------------------------------------------------------- real runs through the library
def _data(learnable: bool, n=400):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=g)
    y = (x[:, 0] > 0).long() if learnable else torch.randint(0, 2, (n,), generator=g)
    return (x[:300], y[:300]), (x[300:], y[300:])


def _mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))


def test_a_model_that_cannot_learn_the_data_is_inconclusive_in_every_mode_and_said_first():
    train, test = _data(learnable=False)
    rep = ampkit.parity(_mlp, train, test, modes="fp32,bf16", seeds=2, epochs=2, lr=1e-2, device="cpu", progress=False)
    fp32, bf16 = rep.results
    assert rep.chance["metric"] == "accuracy" and rep.chance["value"] == pytest.approx(
        float(torch.bincount(test[1]).max()) / len(test[1]))
    assert bf16.verdict == "inconclusive" and "the fp32 baseline did not learn" in bf16.reason and "chance" in bf16.reason
    assert rep.baseline_not_learned == bf16.reason and rep.failed
    assert rep.to_dict()["baseline_not_learned"] == bf16.reason  # in the document
    out = io.StringIO()
    render(rep, Console(file=out, width=200))
    assert out.getvalue().splitlines()[0].startswith("inconclusive: the fp32 baseline did not learn")
    html = rep._repr_html_()
    assert html.index("fp32 baseline") < html.index("bf16")  # the notebook's verdict rows: the baseline first
    assert "fp32 did not learn; fp32 baseline, bf16 inconclusive" in repr(rep)


def test_a_learnable_model_is_judged_as_before():
    train, test = _data(learnable=True)
    rep = ampkit.parity(_mlp, train, test, modes="fp32,bf16", seeds=2, epochs=2, lr=1e-2, device="cpu", progress=False)
    fp32, bf16 = rep.results
    assert rep.baseline_not_learned is None and "did not learn" not in bf16.reason + fp32.reason
    assert fp32.metric["mean"] > rep.chance["value"] + rep.chance["spread"]
    assert all(r.first_loss is not None and r.train_loss[-1] < r.first_loss for r in fp32.runs)
    records = [run for r in rep.results for run in r.runs]
    again = summarize(records, ["fp32", "bf16"], rep.tolerance)  # without the reference: the same verdicts
    assert [r.verdict for r in again] == [r.verdict for r in rep.results]
    assert [r.reason for r in again] == [r.reason for r in rep.results]
