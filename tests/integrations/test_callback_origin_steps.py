"""Where a trainer callback's run fails, named as the audit names it (issues #46, #50): the module whose own
code made the first inf/NaN that matters, the op, the step, traced on a replay of the failing step itself (its
own inputs and weights, before the optimizer applies it), also when every step fails and when only steps 5 and
6 do; one skip ledger equal to the scaler's; ``ampkit report`` names the module. T5 (a tiny config): the
planted feed-forward output is named, never the relative-position bucketing's harmless ``log(0)``.

Runs (one module fixture: Lightning and transformers are imported once): Lightning ``16-mixed`` through its
``MixedPrecision("16-mixed", "cpu")`` plugin (a real GradScaler), Lightning with ampkit's engine (manual
optimization, ``ampkit.MixedPrecision("fp16")``) and the HF Trainer in bf16 on this CPU, on
:class:`origin_models.GatedNet` (its block's own ``h * h`` overflows on the planted batches; the block's
output is its ``down``'s, so module outputs name ``down``), and on T5 with and without the plant.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import ampkit

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning")
pytest.importorskip("transformers")

from helpers import record_scaler_history  # noqa: E402
from origin_models import T5_WO, GatedNet, gated_data, t5, t5_ids  # noqa: E402

STEPS = 8
FP16_AMAX = 300.0   # h * h = 9e4: beyond fp16's 65504, finite in float32
BF16_AMAX = 1e20    # h * h = 1e40: beyond bfloat16's (and float32's) range


class LitGated(L.LightningModule):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def training_step(self, batch, _i):
        out = self.net(batch[0]) if not isinstance(batch, dict) else self.net(**batch)
        return out.loss if hasattr(out, "loss") else torch.nn.functional.cross_entropy(out.float(), batch[1])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class LitEngine(L.LightningModule):
    """ampkit's engine in a LightningModule (manual optimization): its skips never reach Lightning's hooks."""

    def __init__(self, net):
        super().__init__()
        self.automatic_optimization = False
        self.net, self.mp, self.skips = net, ampkit.MixedPrecision("fp16", "cpu"), []

    def training_step(self, batch, _i):
        with self.mp.autocast():
            loss = torch.nn.functional.cross_entropy(self.net(batch[0]).float(), batch[1])
        self.mp.backward(loss)
        if self.mp.step(self.optimizers(), zero_grad=True).skipped:
            self.skips.append(self.mp.stats["steps"])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _engine(tmp, name, data):
    from ampkit.integrations.lightning import AmpkitCallback

    cb = AmpkitCallback(json_path=str(tmp / f"{name}.json"))
    module = LitEngine(GatedNet())
    # Lightning's max_steps counts optimizer.step() calls, which a skipped step does not make
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", callbacks=[cb], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp))
    trainer.fit(module, data)
    return {"cb": cb, "skips": module.skips, "path": tmp / f"{name}.json"}


def _lightning(tmp, name, net, data):
    from lightning.pytorch.plugins import MixedPrecision

    from ampkit.integrations.lightning import AmpkitCallback

    cb = AmpkitCallback(json_path=str(tmp / f"{name}.json"))
    trainer = L.Trainer(max_steps=STEPS, accelerator="cpu", callbacks=[cb], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp),
                        plugins=[MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))])
    history: list = []
    record_scaler_history(trainer.precision_plugin.scaler, history)
    trainer.fit(LitGated(net), data)
    return {"cb": cb, "skips": [i + 1 for i, (found, _s) in enumerate(history) if found], "path": tmp / f"{name}.json"}


class HFGated(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = GatedNet()

    def forward(self, x, labels=None):
        logits = self.net(x)
        return {"loss": torch.nn.functional.cross_entropy(logits.float(), labels), "logits": logits}


class Rows(torch.utils.data.Dataset):
    def __init__(self, **cols):
        self.cols = cols

    def __len__(self):
        return len(next(iter(self.cols.values())))

    def __getitem__(self, i):
        return {k: v[i] for k, v in self.cols.items()}


def _hf(tmp, name, model, data):
    from transformers import Trainer, TrainingArguments

    from ampkit.integrations.transformers import AmpkitCallback

    cb = AmpkitCallback(json_path=str(tmp / f"{name}.json"))
    args = TrainingArguments(output_dir=str(tmp / name), per_device_train_batch_size=8 if "x" in data.cols else 4,
                             max_steps=STEPS, use_cpu=True, report_to=[], save_strategy="no", disable_tqdm=True,
                             bf16=True, train_sampling_strategy="sequential", optim="sgd", learning_rate=0.01)
    Trainer(model=model, args=args, train_dataset=data, callbacks=[cb]).train()
    return {"cb": cb, "path": tmp / f"{name}.json"}


def _loader(x, y):
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)


def _t5_rows(n):
    ids = t5_ids(n)
    return Rows(input_ids=ids, labels=ids)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("origin_steps")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        def t5_batches():
            return torch.utils.data.DataLoader(_t5_rows(4 * STEPS), batch_size=4)

        return {
            "l_two": _lightning(tmp, "l_two", GatedNet(), _loader(*gated_data(STEPS, (5, 6), FP16_AMAX))),
            "l_all": _lightning(tmp, "l_all", GatedNet(), _loader(*gated_data(STEPS, range(1, STEPS + 1), FP16_AMAX))),
            "e_two": _engine(tmp, "e_two", _loader(*gated_data(STEPS, (5, 6), FP16_AMAX))),
            "e_all": _engine(tmp, "e_all", _loader(*gated_data(STEPS, range(1, STEPS + 1), FP16_AMAX))),
            "hf_two": _hf(tmp, "hf_two", HFGated(), Rows(**dict(zip(("x", "labels"), gated_data(STEPS, (5, 6), BF16_AMAX))))),
            "hf_all": _hf(tmp, "hf_all", HFGated(), Rows(**dict(zip(("x", "labels"),
                                                                     gated_data(STEPS, range(1, STEPS + 1), BF16_AMAX))))),
            "l_t5": _lightning(tmp, "l_t5", t5(1e5), t5_batches()),
            "l_t5_clean": _lightning(tmp, "l_t5_clean", t5(), t5_batches()),
            "hf_t5": _hf(tmp, "hf_t5", t5(2e38), _t5_rows(4 * STEPS)),   # outputs ~5e38: bf16 overflows
            "hf_t5_clean": _hf(tmp, "hf_t5_clean", t5(), _t5_rows(4 * STEPS)),
        }
    finally:
        torch.set_num_threads(threads)


def _first(r):
    return r["cb"].summary["first_nonfinite"]


@pytest.mark.parametrize("key, step, name, in_ref", [
    ("l_two", 5, "net.block", False), ("l_all", 1, "net.block", False),
    ("e_two", 5, "net.block", False), ("e_all", 1, "net.block", False),
    ("hf_two", 5, "net.block", True), ("hf_all", 1, "net.block", True)])
def test_the_block_whose_own_code_overflows_is_named_on_its_step(runs, key, step, name, in_ref):
    first = _first(runs[key])
    assert {k: first.get(k) for k in ("name", "phase", "op", "step", "in_reference", "received_by", "traced")} == {
        "name": name, "phase": "forward", "op": "mul", "step": step, "in_reference": in_ref,
        "received_by": f"{name}.down", "traced": "failing step"}
    doc = json.loads(runs[key]["path"].read_text())
    assert doc["first_nonfinite"] == first
    finding = doc["findings"][0]
    assert finding["kind"] == "nonfinite" and finding["layer"] == name and "made by mul" in finding["advice"]
    assert ("Keep net.block in float32" in finding["advice"]) is (not in_ref)


@pytest.mark.parametrize("key, skips", [("l_two", [5, 6]), ("l_all", list(range(1, STEPS + 1))),
                                        ("e_two", [5, 6]), ("e_all", list(range(1, STEPS + 1)))])
def test_one_skip_ledger_equal_to_the_scalers_skips(runs, key, skips):
    r = runs[key]
    assert r["skips"] == skips
    doc = json.loads(r["path"].read_text())
    assert doc["ledger"]["skipped_steps"] == skips == doc["summary"]["skipped_steps"] == r["cb"].ledger["skipped_steps"]
    assert doc["skipped_steps"] == len(skips) and doc["ledger"]["steps"] == STEPS
    ring = doc["ring_buffer"]   # the steps up to the failure, each once, their skips those of the ledger
    assert ring["steps"] == sorted(set(ring["steps"])) and ring["steps"][-1] == skips[0]
    if key.startswith("l_"):   # the plugin's loss: itself, not the scaled loss it backpropagates (the engine's: unseen)
        assert all(0 < v < 5 for v in ring["loss"][:-1])
    assert [s for s, k in zip(ring["steps"], ring["skipped"]) if k] == [s for s in skips if s in ring["steps"]]


def test_t5s_planted_feed_forward_is_named_never_the_position_buckets(runs):
    for key, in_ref in (("l_t5", False), ("hf_t5", True)):
        first = _first(runs[key])
        name = T5_WO if key.startswith("hf") else f"net.{T5_WO}"
        assert (first["name"], first["op"], first["in_reference"], first["traced"]) == (name, "linear", in_ref,
                                                                                      "failing step"), key
        assert "SelfAttention" not in json.dumps(json.loads(runs[key]["path"].read_text())["findings"])
    for key in ("l_t5_clean", "hf_t5_clean"):
        s = runs[key]["cb"].summary
        assert s["first_nonfinite"] is None and s["steps"] == STEPS and not s["skipped_steps"], key
        assert not [f for f in runs[key]["cb"].record.findings if f["kind"] == "nonfinite"], key


def test_ampkit_report_names_the_module(runs, tmp_path):
    paths = [str(runs[k]["path"]) for k in ("l_two", "hf_all", "l_t5")]
    out = tmp_path / "r.md"
    r = subprocess.run([sys.executable, "-m", "ampkit", "report", *paths, "--markdown", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert "net.block" in text and "made by mul" in text and f"net.{T5_WO}" in text
