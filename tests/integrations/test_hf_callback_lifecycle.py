"""The HuggingFace callback as a team leaves it on: trackers, a real loss scaler's skip and the
scheduler, exceptions and Ctrl-C, a second ``train()``, resume from a checkpoint.

A real GradScaler on this CPU: accelerate makes none without a GPU, so the test gives the
Trainer's accelerator ``torch.amp.GradScaler("cpu")`` before ``train()`` (accelerate wraps the
optimizer with ``scaler=accelerator.scaler`` and scales the loss with it, as on a GPU). A module's
backward multiplies its gradient by inf at one global step: the forward stays finite, the scaler
skips that step and halves its scale (1024 -> 512).

With transformers' default optimizer ``adamw_torch_fused`` GradScaler calls the fused step even on
a skipped step (the optimizer checks found_inf itself), accelerate's ``step_was_skipped`` stays
False, and the Trainer steps its scheduler: the callback's warning names that optimizer. With
``adamw_torch`` accelerate sees the skip and the Trainer's guard holds: no warning.
"""

from __future__ import annotations

import json
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments  # noqa: E402

from ampkit.integrations.record import SchedulerStepWarning  # noqa: E402
from ampkit.integrations.transformers import AmpkitCallback  # noqa: E402

STEPS = 8


class GradBoom(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g * float("inf")


class Planted(torch.nn.Module):
    """At global step ``boom``: an inf gradient (``grad``) or an exception in the forward (``raise_``)."""

    def __init__(self, boom=None, raise_=None):
        super().__init__()
        self.step, self.boom, self.raise_ = 0, boom, raise_

    def forward(self, x):
        if self.training and self.step == self.boom:
            if self.raise_ is not None:
                raise self.raise_("planted at step 6")
            return GradBoom.apply(x)
        return x


class Recorder(TrainerCallback):
    """The global step for the plant; what ``on_log`` hands to every tracker."""

    def __init__(self, planted):
        self.planted, self.logs = planted, []

    def on_step_begin(self, args, state, control, **kw):
        self.planted.step = state.global_step + 1

    def on_log(self, args, state, control, logs=None, **kw):
        self.logs.append(dict(logs))


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 64, (12,), generator=g), "labels": torch.tensor(i % 2)}


def _trainer(tmp, name, cb, *, boom=None, raise_=None, optim=None, scaler=True, save_steps=None):
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=32, num_labels=2)
    model = BertForSequenceClassification(cfg)
    planted = Planted(boom, raise_)
    inter = model.bert.encoder.layer[1].intermediate
    inter.intermediate_act_fn = torch.nn.Sequential(inter.intermediate_act_fn, planted)
    rec = Recorder(planted)
    args = TrainingArguments(output_dir=str(tmp / name), per_device_train_batch_size=8, max_steps=STEPS,
                             use_cpu=True, report_to=[], logging_steps=2, disable_tqdm=True,
                             lr_scheduler_type="linear", **({"optim": optim} if optim else {}),
                             **({"save_strategy": "steps", "save_steps": save_steps} if save_steps
                                else {"save_strategy": "no"}))
    trainer = Trainer(model=model, args=args, train_dataset=Data(), callbacks=[rec])
    trainer.add_callback(cb)
    if scaler:
        trainer.accelerator.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    return trainer, rec, model


def _train(trainer, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train(**kw)
    return [str(w.message) for w in caught if issubclass(w.category, SchedulerStepWarning)]


def _hooks(model) -> int:
    return sum(len(m._forward_hooks) for m in model.modules())


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def fused(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fused")
    cb = AmpkitCallback(json_path=str(tmp / "run.json"))
    trainer, rec, model = _trainer(tmp, "fused", cb, boom=5)
    said = _train(trainer)
    return {"cb": cb, "trainer": trainer, "rec": rec, "said": said, "model": model, "path": tmp / "run.json"}


def test_trackers_receive_the_scale_and_the_skips_at_each_logging_step(fused):
    logs = [entry for entry in fused["rec"].logs if "loss" in entry]
    assert [e["amp/loss_scale"] for e in logs] == [1024.0, 1024.0, 512.0, 512.0]
    assert [e["amp/skipped_steps"] for e in logs] == [0.0, 0.0, 1.0, 1.0]
    assert [e["amp/skipped_in_window"] for e in logs] == [0.0, 0.0, 1.0, 0.0]
    assert not any("amp/first_nonfinite" in e for e in logs)      # a skip is not a failure


def test_the_trainers_own_history_keeps_its_last_entry(fused):
    history = fused["trainer"].state.log_history
    assert "train_loss" in history[-1] and "ampkit" not in history[-1]
    assert not any(k.startswith("amp/") for entry in history for k in entry)   # its entries are its own
    ours = [h for h in history if "ampkit" in h]
    assert len(ours) == 1 and ours[0]["ampkit"]["skipped_steps"] == [5]


def test_fused_default_optimizer_is_named_as_the_cause(fused):
    import accelerate
    import transformers

    assert fused["trainer"].args.optim.value == "adamw_torch_fused"
    assert len(fused["said"]) == 1
    msg = fused["said"][0]
    assert "advanced on step 5" in msg and "AdamW(fused=True" in msg and f"torch {torch.__version__}" in msg
    assert f"accelerate {accelerate.__version__}'s step_was_skipped stays False" in msg
    assert f"transformers {transformers.__version__}" in msg and "optim='adamw_torch'" in msg
    assert fused["cb"].summary["scheduler_advanced_on_skipped"] == [5]


def test_one_ledger_in_the_document(fused):
    doc = json.loads(fused["path"].read_text())
    assert doc["ledger"]["skipped_steps"] == doc["summary"]["skipped_steps"] == [5]
    assert "1 skipped [5]" in doc["note"] and doc["skipped_steps"] == 1
    assert _hooks(fused["model"]) == 0


def test_unfused_optimizer_lets_the_trainers_guard_hold(tmp_path):
    cb = AmpkitCallback()
    trainer, _rec, _model = _trainer(tmp_path, "unfused", cb, boom=5, optim="adamw_torch")
    assert _train(trainer) == []
    assert cb.ledger["skipped_steps"] == [5] and cb.summary["scheduler_advanced_on_skipped"] == []


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_an_exception_at_step_6_leaves_no_hook_and_a_document_of_5_steps(tmp_path, exc):
    path = tmp_path / "run.json"
    cb = AmpkitCallback(json_path=str(path), read_every=4)
    trainer, _rec, model = _trainer(tmp_path, "boom", cb, boom=6, raise_=exc)
    with pytest.raises(exc, match="planted at step 6"):
        trainer.train()
    assert _hooks(model) == 0
    doc = json.loads(path.read_text())
    assert doc["steps"] == 5 and doc["ledger"]["steps"] == 5 and doc["ring_buffer"]["steps"] == [1, 2, 3, 4, 5]
    assert f"training ended by {exc.__name__} after 5 recorded step(s)" in " ".join(doc["summary"]["warnings"])
    assert cb.summary["steps"] == 5
    # the same callback object, a second train() on a clean model: it starts clean
    trainer2, _rec2, model2 = _trainer(tmp_path, "again", cb)
    _train(trainer2)
    assert cb.ledger["steps"] == STEPS and cb.summary["warnings"] == [] and _hooks(model2) == 0
    assert json.loads(path.read_text())["ring_buffer"]["steps"] == list(range(1, STEPS + 1))


def test_resume_numbers_global_steps_and_continues_the_ledger(tmp_path):
    first = AmpkitCallback()
    trainer, _rec, _m = _trainer(tmp_path, "run", first, boom=3, save_steps=4)
    _train(trainer)
    assert first.ledger["skipped_steps"] == [3]
    saved = json.loads((tmp_path / "run" / "checkpoint-4" / "ampkit_callback_state.json").read_text())
    assert saved["steps"] == 4 and saved["skipped_steps"] == [3]
    # a new process's trainer resumes from checkpoint-4; its step 7 overflows
    resumed = AmpkitCallback(json_path=str(tmp_path / "resumed.json"))
    trainer2, rec2, _m2 = _trainer(tmp_path, "run", resumed, boom=7)
    _train(trainer2, resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-4"))
    assert resumed.ledger["steps"] == STEPS and resumed.ledger["skipped_steps"] == [3, 7]
    doc = json.loads((tmp_path / "resumed.json").read_text())
    assert doc["ring_buffer"]["steps"] == [5, 6, 7, 8]
    assert [e["amp/skipped_in_window"] for e in rec2.logs if "loss" in e] == [0.0, 1.0]
    assert [e["amp/skipped_steps"] for e in rec2.logs if "loss" in e] == [1.0, 2.0]
