"""Step-time overhead of ampkit.MixedPrecision against a hand-written torch.amp loop.

Paired runs in one process on a tiny model: rounds alternate hand-written and engine blocks of
steps so that drift in machine speed hits both; the figure is the median over rounds of
engine time / hand time (with the interquartile range of those ratios), and beside it the
fastest-block ratio (fastest engine block / fastest hand block), which load from other processes
on a shared machine disturbs least.
Target: <= 1.02 for fp16 and bf16 with the default optimizer (``SGD()``: for-loop on a CPU,
foreach on CUDA). The ``control`` rows time a second hand-written loop in the engine's place:
what the method reads when there is no difference at all (its noise and bias on this machine
at this minute), to set beside the engine's figure. The fused rows (``SGD(fused=True)``) show what the engine's one ``found_inf``
read per step costs there (the hand loop learns nothing about skips, so it has no such read).

    python benchmarks/engine_overhead.py [--device auto] [--rounds 41] [--steps 20] [--impls default,fused] [--no-control]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn as nn

from ampkit.backends.torch.devices import resolve_device
from ampkit.backends.torch.engine import MixedPrecision

IMPLS = {"default": {}, "fused": {"fused": True}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}


def make(device, width, impl):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10)).to(device)
    return model, torch.optim.SGD(model.parameters(), lr=1e-3, **IMPLS[impl])


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # a host-device sync: only around the timed block


def hand_block(model, opt, scaler, dtype, x, y, steps):
    for _ in range(steps):
        with torch.autocast(x.device.type, dtype=dtype):
            loss = nn.functional.cross_entropy(model(x), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        opt.zero_grad(set_to_none=True)


def engine_block(model, opt, mp, x, y, steps):
    for _ in range(steps):
        with mp.autocast():
            loss = nn.functional.cross_entropy(model(x), y)
        mp.backward(loss)
        mp.step(opt, zero_grad=True)


def measure(mode, impl, device, rounds, steps, width, batch, control=False):
    dtype = torch.float16 if mode == "fp16" else torch.bfloat16
    x = torch.randn(batch, width, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    m1, o1 = make(device, width, impl)
    m2, o2 = make(device, width, impl)
    scaler = torch.amp.GradScaler(device.type, init_scale=2.0**10) if mode == "fp16" else None
    mp = MixedPrecision(mode, device, init_scale=2.0**10)
    if control:  # the engine's place taken by a second, identical hand-written loop
        scaler2 = torch.amp.GradScaler(device.type, init_scale=2.0**10) if mode == "fp16" else None

        def second(n):
            hand_block(m2, o2, scaler2, dtype, x, y, n)
    else:

        def second(n):
            engine_block(m2, o2, mp, x, y, n)
    hand_block(m1, o1, scaler, dtype, x, y, steps)  # warm-up, excluded
    second(steps)
    hand, eng = [], []
    for r in range(rounds):
        order = [("hand", hand), ("engine", eng)] if r % 2 == 0 else [("engine", eng), ("hand", hand)]
        for name, out in order:
            sync(device)
            t = time.perf_counter()
            if name == "hand":
                hand_block(m1, o1, scaler, dtype, x, y, steps)
            else:
                second(steps)
            sync(device)
            out.append((time.perf_counter() - t) / steps)
    ratios = sorted(e / h for e, h in zip(eng, hand))  # paired: each round's engine vs its hand block
    q = lambda f: ratios[min(len(ratios) - 1, int(f * len(ratios)))]  # noqa: E731
    return (statistics.median(hand), statistics.median(eng), statistics.median(ratios), (q(0.25), q(0.75)),
            min(eng) / min(hand))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto")
    p.add_argument("--rounds", type=int, default=41)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--impls", default="default,fused", help=f"optimizer implementations: {', '.join(IMPLS)}")
    p.add_argument("--no-control", action="store_true", help="skip the hand-vs-hand control rows")
    args = p.parse_args()
    impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    unknown = [i for i in impls if i not in IMPLS]
    if unknown:
        p.error(f"unknown --impls {', '.join(unknown)}; choose from {', '.join(IMPLS)}")
    device = resolve_device(args.device)
    print(f"device {device}, model Linear({args.width})-ReLU-Linear(10), batch {args.batch}, "
          f"{args.rounds} paired rounds x {args.steps} steps")
    print(f"{'mode':5} {'optimizer':9} {'hand ms/step':>13} {'engine ms/step':>15} {'median ratio':>13} {'IQR':>13} "
          f"{'fastest ratio':>14}")
    rows = [(impl, False) for impl in impls] + ([] if args.no_control else [("control", True)])
    for impl, control in rows:
        for mode in ("fp16", "bf16"):
            h, e, ratio, (lo, hi), fastest = measure(mode, "default" if control else impl, device, args.rounds,
                                                     args.steps, args.width, args.batch, control=control)
            print(f"{mode:5} {impl:9} {h * 1e3:13.4f} {e * 1e3:15.4f} {ratio:13.3f}   {lo:.3f}-{hi:.3f} {fastest:14.3f}")


if __name__ == "__main__":
    main()
