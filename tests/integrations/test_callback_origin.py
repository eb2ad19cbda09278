"""The trainer callbacks name the module whose own code made the first inf/NaN (issue #34): the
Lightning callback under a real fp16 GradScaler (Lightning's MixedPrecision plugin on a CPU), the
HF callback in a real Trainer (bf16 on a CPU: scores beyond float32's range too), and a clean run
never enters the op-level trace."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from origin_models import AttnNet  # noqa: E402


def _data(n=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 5, 16, generator=g).sign() * 3
    return x, torch.randint(0, 4, (n,), generator=g)


def _lightning(tmp, scores, steps=4):
    L = pytest.importorskip("lightning")
    from lightning.pytorch.plugins import MixedPrecision

    from ampkit.integrations.lightning import AmpkitCallback

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = AttnNet(scores)

        def training_step(self, batch, _i):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    cb = AmpkitCallback(json_path=str(tmp / "l.json"), read_every=1)
    trainer = L.Trainer(max_steps=steps, accelerator="cpu", callbacks=[cb], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp),
                        plugins=[MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))])
    x, y = _data()
    module = Module()
    trainer.fit(module, torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8))
    return cb, module


def test_lightning_fp16_names_attn_and_its_matmul(tmp_path):
    cb, _ = _lightning(tmp_path, 255.0)
    first = cb.summary["first_nonfinite"]
    assert {k: first[k] for k in ("name", "phase", "op", "in_reference", "received_by", "step")} == {
        "name": "net.attn", "phase": "forward", "op": "matmul", "in_reference": False,
        "received_by": "net.attn.o", "step": 1}
    doc = json.loads((tmp_path / "l.json").read_text())   # the document written at the failure, rewritten
    assert doc["first_nonfinite"]["name"] == "net.attn" and doc["first_nonfinite"]["op"] == "matmul"
    finding = doc["findings"][0]
    assert finding["layer"] == "net.attn" and "made by matmul" in finding["advice"]
    assert "Keep net.attn in float32" in finding["advice"]


def test_a_clean_run_never_enters_the_op_level_trace(tmp_path, monkeypatch):
    from ampkit.backends.torch.numerics import next_forward, origin

    entered, armed = [], []
    real, arm = origin.OpTrace.__enter__, next_forward.NextForwardTrace.__init__
    monkeypatch.setattr(origin.OpTrace, "__enter__", lambda self: entered.append(1) or real(self))
    monkeypatch.setattr(next_forward.NextForwardTrace, "__init__", lambda self, *a, **k: armed.append(1) or arm(self, *a, **k))
    cb, module = _lightning(tmp_path, 3.0)
    assert cb.summary["first_nonfinite"] is None and cb.summary["steps"] == 4
    assert entered == [] and armed == []
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in module.modules())   # nothing left
    # the spy sees a failing run: the same model with scores beyond fp16 enters the trace once, replaying the
    # failing step (a CPU reads the device for free), and never needs the next forward's
    cb, module = _lightning(tmp_path, 255.0)
    assert armed == [] and entered == [1] and cb.summary["first_nonfinite"]["op"] == "matmul"
    assert cb.summary["first_nonfinite"]["traced"] == "failing step"
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in module.modules())


def test_hf_trainer_names_attn(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from transformers import Trainer, TrainingArguments

    from ampkit.integrations.transformers import AmpkitCallback

    class HFNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = AttnNet(1e20)   # scores ~1e41: beyond bfloat16's and float32's range
            # without a loss scaler a non-finite step reaches the weights: q, k, v frozen (a fine-tuning run)
            # keep the next forward failing where the first did, so the trace has something to explain
            for p in [*self.net.attn.q.parameters(), *self.net.attn.k.parameters(), *self.net.attn.v.parameters()]:
                p.requires_grad_(False)

        def forward(self, x, labels=None):
            logits = self.net(x)
            return {"loss": torch.nn.functional.cross_entropy(logits.float(), labels), "logits": logits}

    class Data(torch.utils.data.Dataset):
        def __init__(self):
            self.x, self.y = _data()

        def __len__(self):
            return len(self.y)

        def __getitem__(self, i):
            return {"x": self.x[i], "labels": self.y[i]}

    cb = AmpkitCallback(json_path=str(tmp_path / "hf.json"), read_every=1)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, max_steps=3,
                             use_cpu=True, report_to=[], save_strategy="no", disable_tqdm=True, bf16=True)
    Trainer(model=HFNet(), args=args, train_dataset=Data(), callbacks=[cb]).train()
    first = cb.summary["first_nonfinite"]
    assert (first["name"], first["phase"], first["op"], first["in_reference"]) == ("net.attn", "forward", "matmul", True)
    doc = json.loads((tmp_path / "hf.json").read_text())
    assert doc["first_nonfinite"]["name"] == "net.attn"
    assert "not a precision problem" in doc["findings"][0]["advice"]
    assert "Keep" not in doc["findings"][0]["advice"]
