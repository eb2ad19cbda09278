"""ampkit parity on a user's own model and data (--model/--data MODULE:FACTORY, ampkit.parity(model=,
data=)): a torchvision model, a planted model that fp16 degrades for real, a clean model whose two
seeds cannot decide, a loss that goes NaN, and bad factories refused before any training.

The factories are tests/parity/parity_factories.py, written as a user would write them."""

from __future__ import annotations

import json
import math
import os

import parity_factories as pf
import pytest

import ampkit
from ampkit import LossScaleWarning
from ampkit.backends.torch import parity as torch_parity
from ampkit.cli.main import main
from ampkit.parity.core import summarize

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def in_here(monkeypatch):
    monkeypatch.chdir(HERE)  # MODULE:FACTORY imports from the current directory, as for a user


def _parity(capsys, *args):
    rc = main(["parity", "--device", "cpu", "--json", "-", *args])
    out = capsys.readouterr()
    return rc, json.loads(out.out), out.err


def test_torchvision_model_on_in_memory_images_reports_both_verdicts(in_here, capsys):
    """Acceptance 1: squeezenet1_1(num_classes=4) (random weights) on 48 generated images, train a
    DataLoader, validation a Dataset; 2 seeds x 1 step: both verdicts in the document and the table."""
    pytest.importorskip("torchvision")
    rc, doc, err = _parity(capsys, "--model", "parity_factories:squeezenet", "--data", "parity_factories:images",
                           "--modes", "fp32,bf16", "--seeds", "2", "--steps", "1")
    rows = {r["mode"]: r for r in doc["results"]}
    assert list(rows) == ["fp32", "bf16"] and doc["steps"] == 1 and doc["epochs"] is None
    assert doc["metric"] == "accuracy" and doc["margin"] == 0.01 and doc["dataset"] == "parity_factories"
    bf16 = rows["bf16"]
    assert bf16["seeds"] == [0, 1] and [r["steps"] for r in bf16["runs"]] == [1, 1]
    assert bf16["verdict"] in ("pass", "fail", "inconclusive") and rc == (0 if bf16["verdict"] == "pass" else 1)
    assert set(bf16["equivalence"]) >= {"verdict", "ci", "seeds_needed"}
    assert bf16["equivalence"]["verdict"] in ("equivalent", "not_equivalent", "inconclusive")
    assert rows["fp32"]["equivalence"] is None and all(math.isfinite(r["train_loss"][-1]) for r in bf16["runs"])
    assert "bf16 equivalence:" in err and "seed 1 (2/2), bf16" in err  # the words, and progress per seed and mode


def test_planted_fp16_forward_underflow_fails_and_is_not_equivalent():
    """Acceptance 2: readings of order 1e-8 under a normalising head. fp32 and bf16 learn them;
    fp16 flushes them to zero before the first matmul (loss scaling cannot help): fail, not equivalent."""
    with pytest.warns(LossScaleWarning, match="loss scale collapsed"):
        rep = ampkit.parity(model=pf.normalized_head, data=pf.sensor_readings, modes="fp32,fp16", seeds=3,
                            epochs=3, lr=2e-2, batch_size=32, device="cpu")
    fp32, fp16 = rep.results
    assert fp32.metric["mean"] > 0.9  # (bf16, slow on a CPU, learns it too: the README's example)
    assert fp16.metric["mean"] < 0.5 and math.isfinite(fp16.final_loss["mean"]) and fp16.nonfinite_seeds == 0
    assert fp16.verdict == "fail" and fp16.equivalence["verdict"] == "not_equivalent"
    assert "worse than fp32 by more than 0.01" in fp16.reason and fp16.skipped_steps > 0 and rep.failed


def test_clean_model_two_seeds_inconclusive_with_seeds_needed_then_equivalent():
    """Acceptance 2: a clean regression in fp16 (the metric: validation loss). Over its first two
    seeds the 90% interval is wider than the margin -> inconclusive with seeds_needed; over six,
    equivalent."""
    margin = 1.5e-4
    rep = ampkit.parity(model=pf.regressor, data=pf.curve, modes="fp32,fp16", seeds=6, epochs=3, lr=1e-2,
                        margin=margin, device="cpu")
    assert rep.metric == "loss" and rep.results[1].metric["higher_is_better"] is False
    records = [run for r in rep.results for run in r.runs]
    two = summarize([r for r in records if r.seed < 2], ["fp32", "fp16"], 0.01, margin=margin, metric="loss",
                    higher_is_better=False)[1]
    assert two.equivalence["verdict"] == "inconclusive" and "crosses the margin" in two.equivalence["reason"]
    assert isinstance(two.equivalence["seeds_needed"], int) and 2 < two.equivalence["seeds_needed"] <= 6
    assert rep.results[1].equivalence["verdict"] == "equivalent", rep.results[1].equivalence


def test_loss_nan_in_every_seed_fails_with_the_count_never_a_traceback(in_here, capsys):
    """Acceptance 3: raw pressures beyond fp16's range: NaN loss in both seeds -> fail, counted."""
    rc, doc, err = _parity(capsys, "--model", "parity_factories:overflowing", "--data", "parity_factories:pressures",
                           "--modes", "fp32,fp16", "--seeds", "2", "--epochs", "1")
    rows = {r["mode"]: r for r in doc["results"]}
    fp16 = rows["fp16"]
    assert rc == 1 and fp16["verdict"] == "fail" and fp16["nonfinite_seeds"] == 2
    assert "non-finite (inf/NaN) in 2 of 2 seeds" in fp16["reason"] and fp16["final_loss"]["mean"] is None
    assert fp16["equivalence"]["verdict"] == "not_equivalent" and rows["fp32"]["nonfinite_seeds"] == 0
    assert "Traceback" not in err


def test_loss_nan_in_some_seeds_fails_with_the_count(in_here, capsys):
    """Acceptance 3, some seeds: one glitched reading beyond fp16's range, reached by seed 0's order only."""
    rc, doc, err = _parity(capsys, "--model", "parity_factories:overflowing", "--data", "parity_factories:glitchy",
                           "--modes", "fp32,fp16", "--seeds", "2", "--steps", "2", "--batch-size", "16")
    fp32, fp16 = doc["results"]
    assert rc == 1 and fp16["verdict"] == "fail" and fp16["nonfinite_seeds"] == 1 and fp32["nonfinite_seeds"] == 0
    assert "non-finite (inf/NaN) in 1 of 2 seeds (seeds [0])" in fp16["reason"]
    assert math.isnan(fp16["runs"][0]["train_loss"][0] if fp16["runs"][0]["train_loss"][0] is not None else math.nan)
    assert math.isfinite(fp16["runs"][1]["train_loss"][0]) and "Traceback" not in err


def test_a_run_that_raises_fails_its_mode_and_the_run_goes_on(monkeypatch):
    real = torch_parity.train_one

    def flaky(make_model, mode, seed, *a, **k):
        if mode == "bf16" and seed == 1:
            raise RuntimeError("planted kernel failure\nsecond line")
        return real(make_model, mode, seed, *a, **k)

    monkeypatch.setattr(torch_parity, "train_one", flaky)
    rep = ampkit.parity(model=pf.regressor, data=pf.curve, modes="fp32,bf16", seeds=2, epochs=1, device="cpu")
    bf16 = rep.results[1]
    assert bf16.verdict == "fail" and bf16.nonfinite_seeds == 1 and bf16.seeds == [0, 1]
    assert "training raised in 1 of 2 seeds (seed 1: RuntimeError: planted kernel failure)" == bf16.reason


@pytest.mark.parametrize("model, data, needle", [
    ("not_a_model", "blobs", "parity_factories:not_a_model() returned a str; expected a torch.nn.Module or an ampkit.Workload"),
    ("normalized_head", "one_dataset", "parity_factories:one_dataset() returned a TensorDataset; expected (train, validation)"),
    ("normalized_head", "empty", "parity_factories:empty: the train data set is empty"),
    ("normalized_head", "wrong_features", "a train batch of parity_factories:wrong_features does not fit"),
    ("normalized_head", "uneven", "the train inputs and targets have different lengths (10 and 7)"),
    ("regressor", "flat_curve", "the train targets of parity_factories:flat_curve are (64,) and "
                                "parity_factories:regressor's output (64, 1): the default loss (mean squared error"),
    ("normalized_head", "short_drop_last", "parity_factories:short_drop_last: the train DataLoader yields no batch: "
                                           "10 samples, batch size 16 and drop_last=True"),
    ("normalized_head", "nosuchmodule:f", "cannot import module 'nosuchmodule' for --data"),
    ("normalized_head", "parity_factories:nothing", "has no attribute 'nothing' (from --data parity_factories:nothing)"),
])
def test_bad_factories_one_line_exit_2_before_any_training(in_here, capsys, monkeypatch, model, data, needle):
    """Acceptance 4: wrong return types, data that does not fit the model, an empty data set."""
    monkeypatch.setattr(torch_parity, "train_one", lambda *a, **k: pytest.fail("trained despite a bad factory"))
    data = data if ":" in data else f"parity_factories:{data}"
    rc = main(["parity", "--device", "cpu", "--model", f"parity_factories:{model}", "--data", data])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("args, needle", [
    (["--model", "parity_factories:regressor"], "--model needs --data too"),
    (["--data", "parity_factories:curve"], "--data needs --model too"),
    (["--dataset", "digits", "--model", "a:b", "--data", "c:d"], "give one or the other"),
    (["--epochs", "2", "--steps", "3"], "give --epochs or --steps, not both"),
    (["--margin", "0"], "--margin must be a positive number"),
    (["--model", "nocolon", "--data", "c:d"], "--model must look like MODULE:FACTORY"),
])
def test_bad_flags_one_line_exit_2(in_here, capsys, args, needle):
    rc = main(["parity", "--device", "cpu", *args])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err


def test_library_refuses_mixing_the_two_ways():
    from ampkit.errors import UsageError

    with pytest.raises(UsageError, match="not both"):
        ampkit.parity(pf.regressor, model=pf.regressor, data=pf.curve)
    with pytest.raises(UsageError, match="model= needs data="):
        ampkit.parity(model=pf.regressor)


def test_a_workload_brings_its_loss_and_metric():
    rep = ampkit.parity(model=pf.workload, data=pf.curve, modes="fp32,bf16", seeds=2, epochs=1, device="cpu")
    assert rep.metric == "mean_abs_error" and rep.results[1].metric["higher_is_better"] is True
    fp32 = rep.results[0].runs[0]
    assert -1.5 < fp32.test_accuracy[-1] < 0 and fp32.test_loss[-1] > 0  # the negated error; the MSE


def test_a_dataloader_keeps_its_drop_last():
    """A user's DataLoader(drop_last=True) (e.g. for BatchNorm, which refuses a batch of one) trains on
    full batches only: the paired order keeps the loader's drop_last."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from ampkit.backends.torch.parity_data import make_feed

    ds = TensorDataset(torch.zeros(33, 8), torch.zeros(33).long())
    feed = make_feed(DataLoader(ds, batch_size=16, shuffle=True, drop_last=True), "train", "f", 64)
    assert [len(x) for x, _ in feed.batches(0, 0, "cpu")] == [16, 16]
    feed = make_feed(DataLoader(ds, batch_size=16), "train", "f", 64)
    assert [len(x) for x, _ in feed.batches(0, 0, "cpu")] == [16, 16, 1]
