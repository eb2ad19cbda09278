"""Cost of an audited step against a plain training step in the same mode.

The audit runs an fp32 reference and the audited mode with hooks on every module, so it is
expected to cost a few plain steps; target: at most 3x. An audit can never cost less than
1 + t(fp32 step) / t(mode step) (it must run the fp32 reference), so the script prints that
floor too: where a mode is much faster than fp32 (bf16 on Ampere and later), the floor alone
exceeds 3x. Also checks that a model carries no hooks when no audit runs (zero cost when off).

    python benchmarks/audit_overhead.py [--mode fp16|bf16] [--device auto] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn as nn

import ampkit
from ampkit.backends.torch.devices import resolve_device
from ampkit.backends.torch.engine import MixedPrecision
from ampkit.backends.torch.timing import synchronize


def build(device):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 512), nn.LayerNorm(512), nn.GELU(), nn.Linear(512, 512), nn.GELU(),
                         nn.Linear(512, 10)).to(device)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", default="fp16", help="fp16 (the audit's default mode) or bf16")
    p.add_argument("--device", default="auto")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=128)
    args = p.parse_args()
    device = resolve_device(args.device)
    model = build(device)
    x = torch.randn(args.batch, 256, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    mp = MixedPrecision(args.mode, device)
    mp32 = MixedPrecision("fp32", device)

    def plain(n, mp=mp):
        for _ in range(n):
            with mp.autocast():
                loss = nn.functional.cross_entropy(model(x).float(), y)
            mp.backward(loss)
            mp.step(opt, zero_grad=True)

    def audited(n):
        ampkit.audit(model, (x, y), mode=args.mode, steps=n, device=device)

    plain(2)
    audited(1)
    ratios, floors = [], []
    for _ in range(args.rounds):
        synchronize(device)
        t = time.perf_counter()
        plain(args.steps, mp32)
        synchronize(device)
        t_fp32 = (time.perf_counter() - t) / args.steps
        synchronize(device)
        t = time.perf_counter()
        plain(args.steps)
        synchronize(device)
        t_plain = (time.perf_counter() - t) / args.steps
        t = time.perf_counter()
        audited(args.steps)
        synchronize(device)
        t_audit = (time.perf_counter() - t) / args.steps
        ratios.append(t_audit / t_plain)
        floors.append((t_plain + t_fp32) / t_plain)
    hooks = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
    print(f"device {device}, mode {args.mode}, MLP 256-512-512-10 with LayerNorm/GELU, batch {args.batch}")
    print(f"plain {args.mode} step {t_plain * 1e3:.2f} ms, plain fp32 step {t_fp32 * 1e3:.2f} ms, "
          f"audited step {t_audit * 1e3:.2f} ms")
    print(f"floor (an fp32 reference step plus the {args.mode} step, no hooks): median "
          f"{statistics.median(floors):.2f}x")
    print(f"audited / plain step time: median {statistics.median(ratios):.2f}x over {args.rounds} paired rounds "
          f"(min {min(ratios):.2f}x, max {max(ratios):.2f}x); target <= 3x")
    print(f"hooks left on the model after the audits: {hooks}")


if __name__ == "__main__":
    main()
