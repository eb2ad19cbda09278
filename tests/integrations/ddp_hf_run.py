"""One rank of ``torchrun --nproc_per_node 2 ddp_hf_run.py OUT``: a tiny BERT in the HF Trainer
(bf16, CPU, gloo), its forward overflowing on rank 1 only from global step 5 on. Rank 0 writes
what its callback holds to OUT/summary.json (read by test_callback_ranks.py)."""

import json
import os
import sys

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments

from ampkit.integrations.transformers import AmpkitCallback

PLANT_FROM = 5
RANK = int(os.environ.get("RANK", "0"))


class Planted(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.step = 0

    def forward(self, x):
        return x * float("inf") if self.training and RANK == 1 and self.step >= PLANT_FROM else x


class Step(TrainerCallback):
    def __init__(self, planted):
        self.planted = planted

    def on_step_begin(self, args, state, control, **kw):
        self.planted.step = state.global_step + 1


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 128

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 64, (12,), generator=g), "labels": torch.tensor(i % 2)}


def main(out):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=32, num_labels=2)
    model = BertForSequenceClassification(cfg)
    planted = Planted()
    inter = model.bert.encoder.layer[1].intermediate
    inter.intermediate_act_fn = torch.nn.Sequential(inter.intermediate_act_fn, planted)
    cb = AmpkitCallback(json_path=os.path.join(out, "run.json"))
    args = TrainingArguments(output_dir=os.path.join(out, "trainer"), per_device_train_batch_size=4, max_steps=8,
                             use_cpu=True, bf16=True, report_to=[], logging_steps=4, save_strategy="no",
                             disable_tqdm=True, ddp_backend="gloo")
    trainer = Trainer(model=model, args=args, train_dataset=Data(), callbacks=[Step(planted), cb])
    trainer.train()
    with open(os.path.join(out, f"summary{RANK}.json"), "w") as fh:
        json.dump({"summary": cb.summary, "world": args.world_size}, fh, default=str)
    if torch.distributed.is_initialized():  # as torch asks: a gloo group left to the interpreter's exit can
        torch.distributed.destroy_process_group()  # abort there ("terminate called ...") on a loaded machine


if __name__ == "__main__":
    main(sys.argv[1])
