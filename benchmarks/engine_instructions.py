"""Instructions per training step: ampkit.MixedPrecision against a hand-written torch.amp loop.

A timing on a shared machine moves by a few percent from minute to minute (see the control rows
of ``engine_overhead.py``); an instruction count does not. Each loop runs under valgrind's
callgrind twice, for ``--short`` and ``--long`` steps, with ``PYTHONHASHSEED=0`` so that the
interpreter's start-up and imports execute the same instructions both times; the difference over
the extra steps is the cost of one step, start-up excluded. Same model, data and optimizer as
``engine_overhead.py`` (its ``make``, ``hand_block`` and ``engine_block``), one intra-op thread.

What it cannot see: cache and branch-predictor effects of running more (or other) code, which a
timing does see. Needs ``valgrind`` on PATH; about 10 minutes on two cores.

    python benchmarks/engine_instructions.py [--modes fp16,bf16] [--short 10] [--long 1010] [--jobs 2]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def inner(mode: str, which: str, steps: int) -> None:
    import torch

    sys.path.insert(0, HERE)
    from engine_overhead import engine_block, hand_block, make

    from ampkit.backends.torch.engine import MixedPrecision

    torch.set_num_threads(1)
    device = torch.device("cpu")
    dtype = torch.float16 if mode == "fp16" else torch.bfloat16
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 64, generator=g), torch.randint(0, 10, (32,), generator=g)
    model, opt = make(device, 64, "default")
    if which == "hand":
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10) if mode == "fp16" else None
        hand_block(model, opt, scaler, dtype, x, y, steps)
    else:
        engine_block(model, opt, MixedPrecision(mode, device, init_scale=2.0**10), x, y, steps)


def count(mode: str, which: str, steps: int) -> int:
    """Instructions of one whole run of ``steps`` steps (callgrind's 'Collected')."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.out", sys.executable,
               os.path.abspath(__file__), "--inner", mode, which, str(steps)]
        r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    found = re.search(r"Collected\s*:\s*(\d+)", r.stderr)
    if r.returncode != 0 or not found:
        raise SystemExit(f"valgrind run failed ({' '.join(cmd[3:])}): {r.stderr[-1500:]}")
    return int(found.group(1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--modes", default="fp16,bf16")
    p.add_argument("--short", type=int, default=10)
    p.add_argument("--long", type=int, default=1010)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--inner", nargs=3, metavar=("MODE", "WHICH", "STEPS"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.inner:
        inner(args.inner[0], args.inner[1], int(args.inner[2]))
        return
    if shutil.which("valgrind") is None:
        p.error("valgrind is not on PATH (apt install valgrind)")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not set(modes) <= {"fp16", "bf16"} or not 0 < args.short < args.long:
        p.error("--modes takes fp16 and/or bf16, and 0 < --short < --long")
    runs = [(m, w, n) for m in modes for w in ("hand", "engine") for n in (args.short, args.long)]
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        totals = dict(zip(runs, pool.map(lambda r: count(*r), runs)))
    extra = args.long - args.short
    print(f"instructions per step (callgrind, {extra} extra steps, PYTHONHASHSEED=0, 1 thread)")
    print(f"{'mode':5} {'hand':>12} {'engine':>12} {'ratio':>7}")
    for m in modes:
        per = {w: (totals[(m, w, args.long)] - totals[(m, w, args.short)]) / extra for w in ("hand", "engine")}
        print(f"{m:5} {per['hand']:12,.0f} {per['engine']:12,.0f} {per['engine'] / per['hand']:7.4f}")


if __name__ == "__main__":
    main()
