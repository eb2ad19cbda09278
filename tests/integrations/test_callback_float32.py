"""A plain float32 run whose own ``exp`` overflows (issue #50): the HF Trainer callback's finding names
where it began and gives no precision advice -- the run is in float32 already, and bf16 would not help."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

import story_models as sm  # noqa: E402


def test_hf_trainer_float32_run_gives_no_precision_advice(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from transformers import Trainer, TrainingArguments

    from ampkit.integrations.transformers import AmpkitCallback

    class HFPoisson(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = sm.poisson()

        def forward(self, x, labels=None):
            rate = self.net(x)
            return {"loss": sm.loss_poisson(rate, labels), "logits": rate}

    class Data(torch.utils.data.Dataset):
        def __init__(self):
            self.x, self.y = sm.batch_poisson()

        def __len__(self):
            return len(self.y)

        def __getitem__(self, i):
            return {"x": self.x[i], "labels": self.y[i]}

    cb = AmpkitCallback(json_path=str(tmp_path / "hf.json"), read_every=1)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, max_steps=2,
                             use_cpu=True, report_to=[], save_strategy="no", disable_tqdm=True)
    Trainer(model=HFPoisson(), args=args, train_dataset=Data(), callbacks=[cb]).train()
    doc = json.loads((tmp_path / "hf.json").read_text())
    assert doc["mode"] == "fp32" and doc["first_nonfinite"] is not None
    advice = " ".join(f["advice"] for f in doc["findings"])
    assert "not a precision problem" in advice, advice
    assert "in float32, or" not in advice and "Keep" not in advice and "bf16" not in advice.split("`")[0], advice
