"""HF Trainer runs compared (#48 point 3): four runs of a small BERT from a config (fp32 and bf16,
two seeds each, the ampkit callback on) -> `ampkit parity --runs` gives parity's verdict keys; one
run per mode, no verdict; a run of another model is refused."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments  # noqa: E402

from ampkit.cli.main import main  # noqa: E402
from ampkit.integrations.transformers import AmpkitCallback  # noqa: E402

STEPS = 6


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, 64, (12,), generator=g)
        return {"input_ids": ids, "labels": torch.tensor(int(ids[0]) % 2)}


def _accuracy(pred):
    return {"accuracy": float((pred.predictions.argmax(-1) == pred.label_ids).mean())}


def _run(tmp, mode, seed, layers=1):
    cfg = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=layers, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=32, num_labels=2)
    torch.manual_seed(seed)
    model = BertForSequenceClassification(cfg)
    path = tmp / f"{mode}-{seed}-{layers}.json"
    args = TrainingArguments(output_dir=str(tmp / path.stem), per_device_train_batch_size=8, per_device_eval_batch_size=32,
                             max_steps=STEPS, use_cpu=True, report_to=[], logging_steps=1, eval_strategy="steps",
                             eval_steps=STEPS, save_strategy="no", disable_tqdm=True, seed=seed,
                             **({"bf16": True} if mode == "bf16" else {}))
    Trainer(model=model, args=args, train_dataset=Data(), eval_dataset=Data(), compute_metrics=_accuracy,
            callbacks=[AmpkitCallback(json_path=str(path))]).train()
    return path


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hfruns")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return tmp, {(m, s): _run(tmp, m, s) for m in ("fp32", "bf16") for s in (0, 1)}
    finally:
        torch.set_num_threads(threads)


def test_the_callback_document_carries_the_run(docs):
    _, paths = docs
    run = json.loads(paths[("bf16", 1)].read_text())["run"]
    assert run["mode"] == "bf16" and run["seed"] == 1 and run["steps"] == STEPS
    assert run["loss_steps"] == list(range(1, STEPS + 1)) and len(run["loss"]) == STEPS
    assert len(run["step_s"]) == STEPS and run["eval"][-1]["step"] == STEPS and "eval_accuracy" in run["eval"][-1]


def test_four_runs_give_parity_keys(docs, tmp_path):
    _, paths = docs
    out = tmp_path / "p.json"
    main(["parity", "--runs", *map(str, paths.values()), "--tolerance", "0.5", "--json", str(out)])
    doc = json.loads(out.read_text())
    assert doc["metric"] == "eval_accuracy" and [r["mode"] for r in doc["results"]] == ["fp32", "bf16"]
    bf16 = doc["results"][1]
    assert bf16["seeds"] == [0, 1] and bf16["verdict"] in ("pass", "fail", "inconclusive")
    assert set(bf16) >= {"delta_vs_fp32", "p_value", "equivalence", "metric", "final_loss"}


def test_one_run_per_mode_and_another_model(docs, tmp_path, capsys):
    tmp, paths = docs
    out = tmp_path / "one.json"
    assert main(["parity", "--runs", str(paths[("fp32", 0)]), str(paths[("bf16", 0)]), "--json", str(out)]) == 1
    assert "one run per mode: no verdict" in json.loads(out.read_text())["results"][1]["reason"]
    capsys.readouterr()
    torch.set_num_threads(1)
    other = _run(tmp, "bf16", 1, layers=2)  # the same class, another size: another model
    assert main(["parity", "--runs", str(paths[("fp32", 0)]), str(other)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "its model 'BertForSequenceClassification (" in err[-1] and "differs from" in err[-1]
