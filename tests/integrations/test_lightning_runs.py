"""Lightning runs compared (#48 point 3): fp32 and bf16 (two seeds each) with the ampkit callback on
-> its documents carry the run (loss at the logging steps, the logged validation metrics, step
times, mode, seed) and `ampkit parity --runs` gives parity's verdict keys."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning")

from ampkit.cli.main import main  # noqa: E402
from ampkit.integrations.lightning import AmpkitCallback  # noqa: E402

STEPS = 6


class Module(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))

    def training_step(self, batch, _i):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, _i):
        x, y = batch
        self.log("val_acc", (self.net(x).argmax(1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.3)


def _data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8 * STEPS, 8, generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8)


def _run(tmp, precision, seed):
    from lightning.pytorch.loggers import CSVLogger

    L.seed_everything(seed, verbose=False)
    path = tmp / f"{precision}-{seed}.json"
    trainer = L.Trainer(max_steps=STEPS, accelerator="cpu", precision=precision, log_every_n_steps=1,
                        logger=CSVLogger(str(tmp / "logs")), callbacks=[AmpkitCallback(json_path=str(path))],
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0, default_root_dir=str(tmp))
    trainer.fit(Module(), _data(), _data())
    return path


def test_lightning_runs_carry_the_run_and_compare(tmp_path):
    torch.set_num_threads(1)
    paths = [_run(tmp_path, p, s) for p in ("32-true", "bf16-mixed") for s in (0, 1)]
    run = json.loads(paths[3].read_text())["run"]
    assert run["mode"] == "bf16" and run["seed"] == 1 and run["steps"] == STEPS
    assert run["loss_steps"] == list(range(1, STEPS + 1)) and len(run["step_s"]) == STEPS
    assert run["model"] == "Module (178 parameters)" and "val_acc" in run["eval"][-1]
    out = tmp_path / "p.json"
    main(["parity", "--runs", *map(str, paths), "--tolerance", "0.5", "--json", str(out)])
    doc = json.loads(out.read_text())
    assert doc["metric"] == "val_acc" and [r["mode"] for r in doc["results"]] == ["fp32", "bf16"]
    assert doc["results"][1]["seeds"] == [0, 1] and doc["results"][1]["verdict"] in ("pass", "fail", "inconclusive")
