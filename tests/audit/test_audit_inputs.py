"""The audit's batch fits the model: token ids for an embedding input, the user's own batch with
``--data``, and the document says what was fed."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from ampkit.audit.config import AuditConfig
from ampkit.audit.driver import audit_here
from ampkit.errors import UsageError
from ampkit.registry import get_backend
from helpers import assert_usage_error

MODELS = textwrap.dedent('''
    import torch
    import torch.nn as nn


    def bert():
        from transformers import BertConfig, BertForSequenceClassification
        torch.manual_seed(0)
        return BertForSequenceClassification(BertConfig(
            vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
            max_position_embeddings=32, num_labels=3))


    class Bag(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.head = nn.Embedding(20, 8), nn.Linear(8, 4)

        def forward(self, ids):
            return self.head(self.emb(ids).mean(1))


    def bag():
        torch.manual_seed(0)
        return Bag()


    def ids():
        g = torch.Generator().manual_seed(1)
        x = torch.randint(40, 50, (64, 8), generator=g)   # the user's ids: only the top of the vocabulary
        return x, torch.randint(0, 3, (64,), generator=g)


    def ids_train_val():
        return ids(), ids()


    def mlp():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 3))


    def wide():
        g = torch.Generator().manual_seed(2)
        return torch.randn(32, 64, generator=g) * 3, torch.randint(0, 3, (32,), generator=g)


    def nothing():
        return 42
''')


@pytest.fixture
def models(tmp_path, monkeypatch):
    (tmp_path / "audmodels.py").write_text(MODELS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("audmodels", None)
    return tmp_path


def _audit(**kw):
    return audit_here(AuditConfig(mode="bf16", device="cpu", **kw), get_backend("torch"))


def test_a_hf_model_from_config_is_fed_token_ids_of_its_vocabulary(models):
    rep = _audit(model="audmodels:bert", input_shape=(8,), batch_size=16)
    fed = rep.input
    assert fed["kind"] == "token_ids" and fed["range"] == [0, 50]
    assert fed["from"] == "bert.embeddings.word_embeddings.num_embeddings"
    assert fed["dtype"] == "int64" and fed["shape"] == [16, 8] and 0 <= fed["min"] and fed["max"] < 50
    assert rep.to_dict()["input"] == fed and rep.layers and rep.first_nonfinite is None
    # the classes come from the classifier's config (3), so the loss ran on its 3 logits
    assert {lay.name: lay for lay in rep.layers}["classifier"].calls == 1


def test_a_model_starting_with_an_embedding_gets_ids_of_its_vocabulary(models):
    rep = _audit(model="audmodels:bag", input_shape=(5,), num_classes=4, batch_size=8)
    assert rep.input["kind"] == "token_ids" and rep.input["range"] == [0, 20] and rep.input["from"] == "emb.num_embeddings"
    assert rep.input["shape"] == [8, 5] and 0 <= rep.input["min"] and rep.input["max"] < 20


@pytest.mark.parametrize("factory", ["ids", "ids_train_val"])
def test_data_audits_the_users_own_batch(models, factory):
    rep = _audit(model="audmodels:bert", input_shape=(8,), data=f"audmodels:{factory}", batch_size=16)
    fed = rep.input
    assert fed["kind"] == "data" and fed["from"] == f"audmodels:{factory}"
    assert fed["shape"] == [16, 8] and fed["min"] >= 40 and fed["max"] <= 49  # the user's ids, not ours


@pytest.mark.parametrize("model,data,shape", [("bert", "ids", [16, 8]), ("mlp", "wide", [16, 64])])
def test_data_gives_a_bare_model_its_input_shape(models, model, data, shape):
    """Issue #46 point 4: no input_shape beside data; the batch audited is the user's, at the batch size."""
    rep = _audit(model=f"audmodels:{model}", data=f"audmodels:{data}", batch_size=16)
    assert rep.input["kind"] == "data" and rep.input["shape"] == shape and rep.layers
    if data == "wide":  # the user's values (3 x N(0,1)), not the workload's N(0,1)
        assert rep.input["max"] > 5 and rep.input["min"] < -5


def test_an_input_shape_the_data_contradicts_is_refused(models):
    for given in ((3,), (64, 1)):
        with pytest.raises(UsageError, match=r"--input-shape .* contradicts the data audmodels:wide, whose inputs "
                                             r"are 64 per sample"):
            _audit(model="audmodels:mlp", data="audmodels:wide", input_shape=given)
    assert _audit(model="audmodels:mlp", data="audmodels:wide", input_shape=(64,)).input["shape"] == [32, 64]


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "ampkit", "audit", "--device", "cpu", *args],
                          capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.mark.parametrize("data,needle", [
    ("audmodels:nothing", "audmodels:nothing: the audit data is a int"),
    ("nomodule:f", "cannot import module 'nomodule' for --data nomodule:f"),
    ("no-colon", "--data must look like MODULE:FACTORY"),
])
def test_bad_data_is_one_line_exit_2(models, data, needle):
    assert_usage_error(_cli("--model", "audmodels:bag", "--input-shape", "5", "--num-classes", "4", "--data", data,
                            cwd=models), needle)


def test_cli_data_without_input_shape_and_a_contradicting_one(models):
    r = _cli("--model", "audmodels:mlp", "--data", "audmodels:wide", "--mode", "bf16", "--json", "-", cwd=models)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["input"]["shape"] == [32, 64]
    assert_usage_error(_cli("--model", "audmodels:mlp", "--data", "audmodels:wide", "--input-shape", "3", cwd=models),
                       "--input-shape 3 contradicts the data audmodels:wide, whose inputs are 64 per sample")


def test_cli_document_says_what_was_fed(models):
    r = _cli("--model", "audmodels:bag", "--input-shape", "5", "--num-classes", "4", "--mode", "bf16", "--json", "-",
             cwd=models)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["input"]["kind"] == "token_ids"
    # stderr is a pipe here, as in a log: a plain line per pass, while it runs
    assert "ampkit audit: step 1/1: float32 reference and bf16 measured (" in r.stderr


def test_float_inputs_are_said_to_be_normal():
    from ampkit.backends.torch.workloads.base import Workload, classification_batches

    wl = Workload(torch.nn.Linear(4, 2), classification_batches((4,), 2), input={"kind": "normal(0,1)"})
    rep = __import__("ampkit").audit(wl, mode="bf16", device="cpu")
    assert rep.input["kind"] == "normal(0,1)" and rep.input["dtype"] == "float32" and rep.input["shape"][1:] == [4]
