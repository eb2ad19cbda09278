"""Does ampkit bench measure the model, not itself? fp32 samples/s from bench's measurement vs a
minimal hand-written training loop on the same model and batch, paired rounds in one process.

Bench's figure comes from ``ampkit.backends.torch.measure.measure`` (what every bench child runs: the
engine, the timing, the memory poller); the hand loop is plain PyTorch timed end to end.
Target: within 5%.

Besides the built-in workloads, two real third-party models built from code with random weights:
``tv-resnet18`` (torchvision ResNet-18, 3x64x64 images, 10 classes) and ``hf-bert`` (a HuggingFace
BERT classifier from a config: 4 layers, hidden 256, sequence 64, its default dropout).

    python benchmarks/harness_overhead.py [--workload mlp|cnn|tv-resnet18|hf-bert|...] [--device auto]
                                          [--rounds 7] [--steps 30] [--batch-size N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ampkit.backends.torch.devices import resolve_device
from ampkit.backends.torch.measure import measure
from ampkit.backends.torch.timing import synchronize
from ampkit.backends.torch.workloads import Workload, build_builtin
from ampkit.backends.torch.workloads.base import classification_batches


def _tv_resnet18() -> Workload:
    import torchvision

    model = torchvision.models.resnet18(weights=None, num_classes=10)
    return Workload(model, classification_batches((3, 64, 64), 10), name="tv-resnet18", batch_size=16)


def _hf_bert() -> Workload:
    from transformers import BertConfig, BertForSequenceClassification

    cfg = BertConfig(vocab_size=8192, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                     intermediate_size=1024, max_position_embeddings=128, num_labels=4)
    model = BertForSequenceClassification(cfg)

    def make_batch(batch_size, device, generator):
        ids = torch.randint(0, cfg.vocab_size, (batch_size, 64), generator=generator)
        y = torch.randint(0, cfg.num_labels, (batch_size,), generator=generator)
        return {"input_ids": ids.to(device)}, y.to(device)

    return Workload(model, make_batch, name="hf-bert", batch_size=16)


EXTRA = {"tv-resnet18": _tv_resnet18, "hf-bert": _hf_bert}


def hand_loop(model, batch, loss_of, opt, steps, device) -> float:
    """Samples/s' denominator the way bench defines it: the MEDIAN step time (bench reports
    batch / median step), each step timed end to end with perf_counter (after a sync on CUDA),
    so the ratio isolates the harness, not mean-vs-median."""
    times = []
    for _ in range(steps):
        synchronize(device)
        t = time.perf_counter()
        loss = loss_of(batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        synchronize(device)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="mlp")
    p.add_argument("--device", default="auto")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=None)
    args = p.parse_args()
    device = resolve_device(args.device)
    torch.manual_seed(0)
    wl = EXTRA[args.workload]() if args.workload in EXTRA else build_builtin(args.workload)
    wl.model.to(device)
    bs = args.batch_size or wl.batch_size
    batch = wl.make_batch(bs, device, torch.Generator().manual_seed(1))
    opt = torch.optim.AdamW(wl.model.parameters(), lr=wl.lr)
    hand_loop(wl.model, batch, wl.loss, opt, 3, device)  # warm-up
    ratios, bench_sps, hand_sps = [], [], []
    for r in range(args.rounds):
        order = ("bench", "hand") if r % 2 == 0 else ("hand", "bench")
        for which in order:
            if which == "bench":
                m = measure(wl, "fp32", device, bs, steps=args.steps, warmup=2)
                b = m.samples_per_s
            else:
                h = bs / hand_loop(wl.model, batch, wl.loss, opt, args.steps, device)
        bench_sps.append(b)
        hand_sps.append(h)
        ratios.append(b / h)
    print(f"workload {args.workload}, device {device}, fp32, batch {bs}, {args.rounds} paired rounds x {args.steps} steps")
    print(f"hand-written loop: {statistics.median(hand_sps):,.1f} samples/s (median)")
    print(f"ampkit bench:      {statistics.median(bench_sps):,.1f} samples/s (median)")
    print(f"bench / hand: median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}); "
          "target within 5%")


if __name__ == "__main__":
    main()
