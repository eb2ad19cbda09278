"""Cost of an ``ampkit audit --what-if`` step against a plain float32 training step, and its peak memory.

A what-if step is one float32 training step (forward, full backward, AdamW) with every module's
output and output gradient summarized where it is produced (amax, exponent histogram, sampled
fp16/bf16 round trips, fp8 quantization of every Linear's input and output gradient under four
scalings). Target: at most 3x a plain step on the CPU workloads, and memory close to a plain step's
(no tensor is kept past its summary). Each (workload, kind) runs in a fresh child process, so its
peak RSS (``ru_maxrss``) is its own; rounds interleave plain and what-if children.

    python benchmarks/whatif_overhead.py [--workloads resnet50,bert-base] [--batch 4] [--steps 3] [--rounds 2]
                                         [--threads N]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time


def child(workload: str, kind: str, batch: int, steps: int, threads: int) -> dict:
    import torch

    if threads:
        torch.set_num_threads(threads)
    from ampkit.backends.torch.whatif import TorchWhatIfSession
    from ampkit.backends.torch.workloads import build_workload

    torch.manual_seed(0)
    dev = torch.device("cpu")
    wl = build_workload(workload, None, None, 10, dev)
    data = wl.make_batch(batch, dev, torch.Generator().manual_seed(0))
    times = []
    if kind == "plain":
        opt = torch.optim.AdamW(wl.model.parameters(), lr=wl.lr)
        wl.model.train()
        for _ in range(steps + 1):
            t0 = time.perf_counter()
            wl.loss(data).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - t0)
    else:
        session = TorchWhatIfSession(wl, data, "fp16", dev, lr=wl.lr)
        for i in range(steps + 1):
            t0 = time.perf_counter()
            session.observe(i)
            times.append(time.perf_counter() - t0)
        session.close()
    return {"step_s": statistics.median(times[1:]),  # the first step warms up
            "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default="resnet50,bert-base")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads in each child (0: torch's default); 1 keeps a shared, loaded machine's "
                        "OpenMP waits out of the comparison")
    p.add_argument("--child", nargs=2, metavar=("WORKLOAD", "KIND"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, args.batch, args.steps, args.threads)))
        return
    for wl in args.workloads.split(","):
        got: dict = {"plain": [], "whatif": []}
        for _ in range(args.rounds):
            for kind in ("plain", "whatif"):
                r = subprocess.run([sys.executable, __file__, "--child", wl, kind, "--batch", str(args.batch),
                                    "--steps", str(args.steps), "--threads", str(args.threads)],
                               capture_output=True, text=True, check=True)
                got[kind].append(json.loads(r.stdout.strip().splitlines()[-1]))
        plain = statistics.median(g["step_s"] for g in got["plain"])
        whatif = statistics.median(g["step_s"] for g in got["whatif"])
        rss_p = max(g["maxrss_mb"] for g in got["plain"])
        rss_w = max(g["maxrss_mb"] for g in got["whatif"])
        print(f"{wl} batch {args.batch}: plain fp32 step {plain:.3f} s, what-if step {whatif:.3f} s "
              f"= {whatif / plain:.2f}x (target <= 3x); peak RSS {rss_p:.0f} MB plain, {rss_w:.0f} MB what-if "
              f"(+{rss_w - rss_p:.0f} MB)")


if __name__ == "__main__":
    main()
