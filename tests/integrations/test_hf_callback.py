"""ampkit.integrations.transformers.AmpkitCallback inside a real HuggingFace Trainer on this CPU.

A tiny BERT built from a config (no download, no tokenizer: tensors), a handful of steps. The
Trainer starts three times in one module-scoped fixture and every check reads those runs:

* bf16 with a planted module that overflows from optimizer step 5 on (gradient accumulation 2:
  on_pre_optimizer_step comes once per optimizer step, as upstream's
  tests/trainer/test_trainer_callback.py::test_event_flow counts it);
* ``fp16=True`` clean: accelerate on a CPU runs float32 without autocast or GradScaler (one line);
* bf16 clean: no findings, no warnings.

On a CPU accelerate makes no GradScaler (fp16 needs a GPU), so the trainer's own history is
``AcceleratedOptimizer.step_was_skipped`` per step and no scale; the scaler ledger against a real
GradScaler is checked in test_lightning_callback.py.
"""

from __future__ import annotations

import json
import logging
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments  # noqa: E402

from ampkit.errors import UsageError  # noqa: E402
from ampkit.health import LossScaleWarning  # noqa: E402
from ampkit.integrations.record import SchedulerStepWarning  # noqa: E402
from ampkit.integrations.transformers import AmpkitCallback  # noqa: E402

PLANT_FROM = 5
STEPS = 8


class Planted(torch.nn.Module):
    """Multiplies by inf from optimizer step ``PLANT_FROM`` on (``step`` is set by :class:`History`)."""

    def __init__(self):
        super().__init__()
        self.step = 0

    def forward(self, x):
        return x * float("inf") if self.training and self.step >= PLANT_FROM else x


class History(TrainerCallback):
    """The trainer's own record, kept apart from ampkit: accelerate's skipped flag per step."""

    def __init__(self, planted=None):
        self.planted, self.skipped, self.scaler = planted, [], "unset"

    def on_step_begin(self, args, state, control, **kw):
        if self.planted is not None:
            self.planted.step = state.global_step + 1

    def on_step_end(self, args, state, control, optimizer=None, **kw):
        self.skipped.append(bool(optimizer.step_was_skipped))
        self.scaler = optimizer.scaler


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 128

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 64, (12,), generator=g), "labels": torch.tensor(i % 2)}


def _bert(plant: bool):
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=32, num_labels=2)
    model = BertForSequenceClassification(cfg)
    planted = None
    if plant:
        planted = Planted()
        inter = model.bert.encoder.layer[1].intermediate
        inter.intermediate_act_fn = torch.nn.Sequential(inter.intermediate_act_fn, planted)
        model.classifier.half()   # a contract violation too: master weights not float32
    return model, planted


def _run(tmp, name, precision, plant=False, accumulate=1):
    model, planted = _bert(plant)
    history = History(planted)
    cb = AmpkitCallback(json_path=str(tmp / f"{name}.json"))
    args = TrainingArguments(output_dir=str(tmp / name), per_device_train_batch_size=8, max_steps=STEPS,
                             gradient_accumulation_steps=accumulate, use_cpu=True, report_to=[], logging_steps=4,
                             save_strategy="no", disable_tqdm=True, lr_scheduler_type="linear",
                             **({precision: True} if precision != "fp32" else {}))
    trainer = Trainer(model=model, args=args, train_dataset=Data(), callbacks=[history])
    trainer.add_callback(cb)   # upstream's test_add_remove_callback: an instance added after construction
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda rec: lines.append(rec.getMessage()) if rec.levelno >= logging.WARNING else None
    logger = logging.getLogger("ampkit.integrations")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer.train()
    finally:
        logger.removeHandler(handler)
    ours = [w for w in caught if issubclass(w.category, (LossScaleWarning, SchedulerStepWarning))]
    return {"cb": cb, "history": history, "trainer": trainer, "lines": lines, "warnings": ours,
            "path": tmp / f"{name}.json"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hf")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # a tiny model: one thread, and no stall when the machine is shared
    try:
        return {"planted": _run(tmp, "planted", "bf16", plant=True, accumulate=2),
                "fp16": _run(tmp, "fp16", "fp16"),
                "clean": _run(tmp, "clean", "bf16")}
    finally:
        torch.set_num_threads(threads)


def test_planted_overflow_names_the_module_and_phase(runs):
    r = runs["planted"]
    first = r["cb"].summary["first_nonfinite"]
    assert first == {"name": "bert.encoder.layer.1.intermediate.intermediate_act_fn.1", "phase": "forward",
                     "step": PLANT_FROM, "op": "mul", "in_reference": True, "traced": "failing step"}
    # x * inf: float32 fails too. Traced on a replay of the failing step itself, before the optimizer applied it
    # (a trace of the next forward would see weights that step made non-finite: issue #46)
    doc = json.loads(r["path"].read_text())
    assert doc["command"] == "audit" and doc["mode"] == "bf16"
    assert doc["first_nonfinite"]["name"] == first["name"]
    assert doc["findings"][0]["kind"] == "nonfinite" and doc["findings"][0]["layer"] == first["name"]
    ring = doc["ring_buffer"]
    assert ring["steps"] == [1, 2, 3, 4, 5]      # the steps before it (fewer than K=8 happened)
    amax = ring["fwd_amax"][first["name"]]
    assert amax[-1] == "inf" and all(isinstance(v, float) and 0 < v < 10 for v in amax[:-1])
    # the loss came from the root's output: finite before, NaN/inf from the planted step on
    assert all(isinstance(v, float) for v in ring["loss"][:-1]) and ring["loss"][-1] in ("nan", "inf")
    assert sum(": first inf/NaN at step" in line for line in r["lines"]) == 1


def test_a_half_layer_is_one_contract_finding_naming_it(runs):
    doc = json.loads(runs["planted"]["path"].read_text())
    contract = [f for f in doc["findings"] if f["kind"] == "contract"]
    assert len(contract) == 1 and "classifier" in contract[0]["layer"] and "float16" in contract[0]["advice"]
    assert sum("precision contract" in line for line in runs["planted"]["lines"]) == 1


def test_ledger_equals_the_trainers_own_history(runs):
    for key in ("planted", "fp16", "clean"):
        r = runs[key]
        ledger, state = r["cb"].ledger, r["trainer"].state
        assert r["history"].scaler is None                      # no GradScaler on a CPU
        assert ledger["steps"] == state.global_step == STEPS
        assert ledger["skipped_steps"] == [i + 1 for i, s in enumerate(r["history"].skipped) if s] == []
        assert ledger["scales"] == []


def test_summary_in_the_trainers_log_and_the_json(runs):
    r = runs["planted"]
    logged = [h["ampkit"] for h in r["trainer"].state.log_history if "ampkit" in h]
    assert len(logged) == 1 and logged[0]["steps"] == STEPS and logged[0]["skipped"] == 0
    doc = json.loads(r["path"].read_text())
    assert doc["summary"]["steps"] == STEPS and doc["summary"]["scale_final"] is None
    assert "8 steps in bf16, 0 skipped" in doc["note"]


def test_fp16_on_a_cpu_says_once_that_float32_runs(runs):
    r = runs["fp16"]
    said = [line for line in r["lines"] if "declares" in line]
    assert len(said) == 1
    assert "TrainingArguments(fp16=True)" in said[0] and "float32 (no autocast, no GradScaler)" in said[0]
    assert r["cb"].record.mode == "fp32"
    doc = json.loads(r["path"].read_text())
    assert [f["kind"] for f in doc["findings"]] == ["contract"] and doc["first_nonfinite"] is None


def test_clean_bf16_run_has_no_findings_and_no_warnings(runs):
    r = runs["clean"]
    assert r["lines"] == [] and r["warnings"] == []
    doc = json.loads(r["path"].read_text())
    assert doc["findings"] == [] and doc["first_nonfinite"] is None and doc["mode"] == "bf16"
    assert doc["summary"]["warnings"] == []
    # the last step's statistics: every module that ran has a finite amax
    assert doc["layers"] and all(lay["fwd_nonfinite"] == 0 for lay in doc["layers"])


def test_ampkit_report_renders_the_callback_documents(runs, tmp_path):
    from ampkit.cli.main import main

    html, md = tmp_path / "r.html", tmp_path / "r.md"
    paths = [str(runs[k]["path"]) for k in ("planted", "fp16", "clean")]
    assert main(["report", *paths, "--html", str(html), "--markdown", str(md)]) in (0, None)
    text = md.read_text()
    assert "first inf/NaN in `bert.encoder.layer.1.intermediate.intermediate_act_fn.1` (forward)" in text
    assert "BertForSequenceClassification" in html.read_text()


@pytest.mark.parametrize("kwargs,needle", [
    ({"json_path": 3}, "json_path must be a file path"),
    ({"k": 0}, "k (steps kept before a failure) must be an int >= 1"),
    ({"read_every": "1"}, "read_every must be an int >= 1"),
    ({"min_scale_warning": -1}, "min_scale_warning"),
])
def test_bad_arguments_are_one_line(kwargs, needle):
    with pytest.raises(UsageError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        AmpkitCallback(**kwargs)


def test_json_path_that_is_a_directory_is_refused(tmp_path):
    with pytest.raises(UsageError, match="is a directory"):
        AmpkitCallback(json_path=str(tmp_path))
