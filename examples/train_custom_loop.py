"""Train a small model with ampkit.MixedPrecision in your own loop.

Shows: MixedPrecision("auto"), gradient accumulation, clipping after unscale, an LR scheduler
that does not step on skipped steps, and an exact checkpoint/resume (weights_only=True).

    python examples/train_custom_loop.py [--mode auto] [--device auto] [--steps 60] [--fused]

``--fused`` uses ``AdamW(fused=True)``: the engine reports its skipped steps and scale exactly too.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import torch
import torch.nn as nn

import ampkit


def make_data(n=2048, dim=32, classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, dim, generator=g) * 2
    y = torch.randint(0, classes, (n,), generator=g)
    x = centers[y] + torch.randn(n, dim, generator=g)
    return x, y


def build(device, lr=0.05, total_steps=60, fused=False):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.LayerNorm(128), nn.Linear(128, 4)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, fused=fused or None)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=total_steps)
    return model, opt, sched


def train(steps, start, model, opt, sched, mp, x, y, micro_bs=32):
    accum = mp.accumulation_steps
    losses = []
    for step in range(start, steps):
        total = 0.0
        for micro in range(accum):
            i = ((step * accum + micro) * micro_bs) % len(x)
            xb, yb = x[i:i + micro_bs].to(mp.device), y[i:i + micro_bs].to(mp.device)
            with mp.accumulate(model):
                with mp.autocast():
                    loss = nn.functional.cross_entropy(model(xb), yb)
                mp.backward(loss)
            total += loss.detach()
        result = mp.step(opt, scheduler=sched, max_grad_norm=1.0, zero_grad=True)
        losses.append(total / accum)
        if step % 10 == 0 or step == steps - 1:
            print(f"step {step:3d}  loss {float(total) / accum:.4f}  scale {result.scale:g}  "
                  f"grad_norm {result.grad_norm:.3f}  skipped {result.skipped}")
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="auto")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--fused", action="store_true", help="AdamW(fused=True)")
    args = parser.parse_args()

    mp = ampkit.MixedPrecision(args.mode, device=args.device, accumulation_steps=2)
    print(f"mode {mp.mode} on {mp.device}: {mp.reason}")
    x, y = make_data()
    half = args.steps // 2

    model, opt, sched = build(mp.device, total_steps=args.steps, fused=args.fused)
    mp.prepare(model)
    train(half, 0, model, opt, sched, mp, x, y)

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ckpt.pt")
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
                    "amp": mp.state_dict(), "step": half}, path)
        print(f"checkpoint written at step {half}; resuming in a fresh model/optimizer/engine")
        ckpt = torch.load(path, weights_only=True)

    model2, opt2, sched2 = build(mp.device, total_steps=args.steps, fused=args.fused)
    model2.load_state_dict(ckpt["model"])
    opt2.load_state_dict(ckpt["opt"])
    sched2.load_state_dict(ckpt["sched"])
    mp2 = ampkit.MixedPrecision(mp.mode, device=mp.device, accumulation_steps=2, model=model2)
    mp2.load_state_dict(ckpt["amp"])
    losses = train(args.steps, ckpt["step"], model2, opt2, sched2, mp2, x, y)

    with torch.no_grad(), mp2.autocast():
        acc = (model2(x.to(mp2.device)).argmax(1).cpu() == y).float().mean().item()
    print(f"final loss {float(losses[-1]):.4f}  train accuracy {acc:.3f}  stats {mp2.stats}")


if __name__ == "__main__":
    main()
