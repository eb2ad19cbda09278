"""``python ddp_lightning_run.py OUT [STRATEGY]``: Lightning ``strategy="ddp"`` (default; Lightning
starts the second process by running this script again) or ``"ddp_spawn"`` on two CPU processes,
bf16, a forward overflowing on rank 1 only from global step 5 on. The launching process (rank 0)
writes its callback's summary to OUT/summary.json (read by test_callback_ranks.py)."""

import json
import os
import sys

import lightning as L
import torch

from ampkit.integrations.lightning import AmpkitCallback

PLANT_FROM = 5


class Module(L.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16),
                                       torch.nn.Linear(16, 2))

    def training_step(self, batch, _i):
        x, y = batch
        h = self.net[1](self.net[0](x))
        return torch.nn.functional.cross_entropy(self.net[3](self.net[2](h)), y)

    def on_train_batch_start(self, batch, batch_idx):
        planted = self.trainer.global_rank == 1 and self.trainer.global_step + 1 >= PLANT_FROM
        self.net[2].weight.data.mul_(float("inf")) if planted and not self._planted else None
        self._planted = self._planted or planted

    _planted = False

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(out, strategy="ddp"):
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(64, 8, generator=g), torch.randint(0, 2, (64,), generator=g))
    cb = AmpkitCallback(json_path=os.path.join(out, "run.json"))
    trainer = L.Trainer(max_steps=8, accelerator="cpu", devices=2, strategy=strategy, precision="bf16-mixed",
                        callbacks=[cb], logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=out)
    trainer.fit(Module(), torch.utils.data.DataLoader(data, batch_size=4))
    if trainer.global_rank == 0:
        with open(os.path.join(out, "summary.json"), "w") as fh:
            json.dump({"summary": cb.summary, "ledger": cb.ledger, "pid": os.getpid()}, fh, default=str)


if __name__ == "__main__":
    main(*sys.argv[1:3])
