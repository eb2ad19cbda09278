"""``ampkit.parity(make_model, train, test)`` takes torch ``Dataset``s and ``DataLoader``s exactly as
a ``--data`` factory's (issue #49 point 2; before: "train must be (inputs, targets); received a
TensorDataset"). The same data through the library's ``data=`` factory and through ``ampkit parity
--data`` gives the same runs, loss for loss."""

from __future__ import annotations

import json
import os

import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import ampkit
from ampkit.cli.main import main

FACTORIES = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def make_model():
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))


def parts():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(400, 6, generator=g)
    y = (x[:, 0] > 0.4).long() + (x[:, 1] > 0.4).long()  # learnable: fp32 is far above chance
    return TensorDataset(x[:300], y[:300]), TensorDataset(x[300:], y[300:])


def loaders():
    train, test = parts()
    return DataLoader(train, batch_size=16, shuffle=True), DataLoader(test, batch_size=32)
'''
KW = {"modes": "fp32,bf16", "seeds": 2, "epochs": 2, "lr": 3e-2, "device": "cpu", "progress": False}


@pytest.fixture(scope="module")
def factories(tmp_path_factory):
    path = tmp_path_factory.mktemp("user") / "parity_user_sets.py"
    path.write_text(FACTORIES)
    scope: dict = {}
    exec(compile(FACTORIES, str(path), "exec"), scope)  # the same functions, for the library's calls
    return str(path), scope


def _runs(results):
    """Every run's numbers, by (mode, seed): what must agree between two ways of giving the data."""
    return {(run["mode"], run["seed"]): (run["train_loss"], run["test_accuracy"], run["test_loss"], run["first_loss"])
            for r in results for run in r["runs"]}


def test_datasets_and_dataloaders_train_as_the_data_factory_does(factories, capsys, monkeypatch):
    path, f = factories
    train, test = f["parts"]()
    by_sets = ampkit.parity(f["make_model"], train, test, **KW)
    by_loaders = ampkit.parity(f["make_model"], *f["loaders"](), **KW)
    by_factory = ampkit.parity(model=f["make_model"], data=f["parts"], **KW)
    by_loader_factory = ampkit.parity(model=f["make_model"], data=f["loaders"], **KW)
    doc = {k: v.to_dict() for k, v in (("sets", by_sets), ("loaders", by_loaders), ("factory", by_factory),
                                       ("loader_factory", by_loader_factory))}
    assert doc["sets"]["metric"] == doc["factory"]["metric"] == "accuracy" and doc["sets"]["epochs"] == 2
    assert _runs(doc["sets"]["results"]) == _runs(doc["factory"]["results"])
    assert _runs(doc["loaders"]["results"]) == _runs(doc["loader_factory"]["results"])
    # a DataLoader's own batch size is kept (16 against 64): other losses than the Dataset's
    assert _runs(doc["loaders"]["results"]) != _runs(doc["sets"]["results"])
    for d in doc.values():
        assert [r["verdict"] for r in d["results"]][0] == "baseline" and d["baseline_not_learned"] is None
    assert [r.verdict for r in by_sets.results] == [r.verdict for r in by_factory.results]
    # the command line's --data: the same runs again
    monkeypatch.chdir(os.path.dirname(path))  # MODULE:FACTORY imports from the current directory
    rc = main(["parity", "--model", "parity_user_sets:make_model", "--data", "parity_user_sets:loaders", "--modes", "fp32,bf16",
               "--seeds", "2", "--epochs", "2", "--lr", "3e-2", "--device", "cpu", "--json", "-"])
    out = capsys.readouterr()
    assert rc in (0, 1), out.err
    cli = json.loads(out.out)
    assert _runs(cli["results"]) == _runs(doc["loaders"]["results"])


def test_a_dataset_beside_arrays_and_an_empty_one_read_as_a_factorys():
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(40, 6, generator=g), torch.randint(0, 3, (40,), generator=g)
    rep = ampkit.parity(lambda: nn.Linear(6, 3), TensorDataset(x[:32], y[:32]), (x[32:], y[32:]), modes="fp32",
                        seeds=1, epochs=1, device="cpu", progress=False)
    assert rep.results[0].verdict == "baseline" and len(rep.results[0].runs[0].train_loss) == 1
    with pytest.raises(ampkit.UsageError, match="the train/test data: the train data set is empty"):
        ampkit.parity(lambda: nn.Linear(6, 3), TensorDataset(x[:0], y[:0]), TensorDataset(x, y), modes="fp32",
                      seeds=1, device="cpu", progress=False)
    with pytest.raises(ampkit.UsageError, match="the validation DataLoader yields no batch"):
        ampkit.parity(lambda: nn.Linear(6, 3), TensorDataset(x, y), DataLoader(TensorDataset(x[:3], y[:3]),
                      batch_size=4, drop_last=True), modes="fp32", seeds=1, device="cpu", progress=False)
