"""Step-time overhead of ampkit.integrations.transformers.AmpkitCallback in a HuggingFace Trainer.

A tiny BERT from a config (no download), two Trainers built once over identically initialised
models — one with the callback, one without — trained in alternating rounds of ``--steps`` steps
so that drift in machine speed hits both. A step is timed from ``on_step_begin`` to ``on_step_end``
(forward, backward, optimizer step, and every callback event in between; the Trainer's start-up
and logging are outside). The figure is the median over rounds of (median step with the
callback) / (median step without), with the interquartile range of those ratios, and the
fastest-step ratio; the ``control`` row times a second Trainer without the callback in its place:
what the method reads when there is no difference. Targets (issue #35): <= 1.05 at bert-tiny's
dimensions (``--preset bert-tiny``: hidden 128, 2 layers, seq 64) and <= 1.02 at hidden 256, 4 layers
(``--preset bert-mini``). The load average is printed before and after: on a shared machine a
figure means little without it.

    python benchmarks/callback_overhead.py [--preset bert-tiny|bert-mini] [--rounds 15] [--steps 20] [--mode bf16]
        [--hidden 16] [--layers 2] [--seq 12] [--threads 1] [--clock cpu]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments
from transformers.utils import logging as hf_logging

from ampkit.integrations.transformers import AmpkitCallback

CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
#: (hidden, layers, seq), target ratio
PRESETS = {"bert-tiny": ((128, 2, 64), 1.05), "bert-mini": ((256, 4, 64), 1.02)}


class StepTimer(TrainerCallback):
    clock = staticmethod(time.perf_counter)

    def __init__(self):
        self.times: list[float] = []
        self._t0 = 0.0

    def on_step_begin(self, args, state, control, **kw):
        self._t0 = self.clock()

    def on_step_end(self, args, state, control, **kw):
        self.times.append(self.clock() - self._t0)


class Data(torch.utils.data.Dataset):
    def __init__(self, n, seq, vocab):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": torch.tensor(i % 2)}


def make(opts, with_callback: bool):
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=opts.vocab, hidden_size=opts.hidden, num_hidden_layers=opts.layers,
                     num_attention_heads=2, intermediate_size=2 * opts.hidden, max_position_embeddings=opts.seq,
                     num_labels=2)
    timer = StepTimer()
    callbacks = [timer] + ([AmpkitCallback()] if with_callback else [])
    args = TrainingArguments(output_dir="/tmp/ampkit_callback_overhead", per_device_train_batch_size=opts.batch,
                             max_steps=opts.steps, use_cpu=True, report_to=[], logging_steps=10_000,
                             save_strategy="no", disable_tqdm=True,
                             **({opts.mode: True} if opts.mode in ("bf16", "fp16") else {}))
    data = Data(opts.batch * opts.steps, opts.seq, opts.vocab)
    return Trainer(model=BertForSequenceClassification(cfg), args=args, train_dataset=data, callbacks=callbacks), timer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--mode", default="bf16", choices=("bf16", "fp16", "fp32"),
                    help="TrainingArguments precision (fp16 runs as float32 on a CPU)")
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seq", type=int, default=12)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier on a shared 2-core machine)")
    ap.add_argument("--clock", choices=tuple(CLOCKS), default="cpu",
                    help="cpu: this thread's CPU time (with --threads 1 it is all the step's work, and other "
                         "processes on a shared machine disturb it least); wall: perf_counter")
    ap.add_argument("--no-control", action="store_true")
    ap.add_argument("--preset", choices=tuple(PRESETS), help="bert-tiny: hidden 128, 2 layers, seq 64 (target "
                    "<= 1.05); bert-mini: hidden 256, 4 layers, seq 64 (target <= 1.02)")
    opts = ap.parse_args()
    target = None
    if opts.preset:
        dims, target = PRESETS[opts.preset]
        opts.hidden, opts.layers, opts.seq = dims
    load0 = os.getloadavg()
    torch.set_num_threads(opts.threads)
    StepTimer.clock = staticmethod(CLOCKS[opts.clock])
    hf_logging.set_verbosity_error()
    logging.getLogger("ampkit.integrations").setLevel(logging.ERROR)

    arms = {"plain": make(opts, False), "callback": make(opts, True)}
    if not opts.no_control:
        arms["control"] = make(opts, False)
    for trainer, _timer in arms.values():   # warm-up round (first-call costs)
        trainer.train()
    per_round: dict[str, list[float]] = {k: [] for k in arms}
    fastest: dict[str, float] = {k: float("inf") for k in arms}
    for _ in range(opts.rounds):
        for name, (trainer, timer) in arms.items():
            timer.times.clear()
            trainer.train()
            steps = timer.times[1:]   # the first step of a train() call pays the dataloader start
            per_round[name].append(statistics.median(steps))
            fastest[name] = min(fastest[name], min(steps))
    print(f"tiny BERT (hidden {opts.hidden}, {opts.layers} layers, seq {opts.seq}, batch {opts.batch}), "
          f"{opts.mode}, torch threads {opts.threads}, {opts.rounds} rounds x {opts.steps} steps, {opts.clock} clock")
    print(f"load average (1, 5, 15 min) before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, "
          f"after {' '.join(f'{v:.2f}' for v in os.getloadavg())} on {os.cpu_count()} CPUs")
    print(f"plain step median {statistics.median(per_round['plain']) * 1e3:.2f} ms"
          + (f"; target ratio <= {target}" if target else ""))
    for name in [k for k in arms if k != "plain"]:
        ratios = sorted(a / b for a, b in zip(per_round[name], per_round["plain"]))
        q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
        print(f"{name:9s} median ratio {statistics.median(ratios):.3f} (IQR {q[0]:.3f}-{q[2]:.3f}), "
              f"fastest-step ratio {fastest[name] / fastest['plain']:.3f}")


if __name__ == "__main__":
    main()
