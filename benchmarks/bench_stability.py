"""Issue 45 acceptance 1: bench's verdicts hold still on a shared CPU whose load comes and goes.

Runs the same ``ampkit bench ... --modes fp32,bf16,fp16`` RUNS times (default 5) while a background
load generator burns CPU in bursts (``--load-on`` seconds on, ``--load-off`` off, ``--load-procs``
processes), then a hand-written interleaved loop of the same model, batch and thread count under the
same load (``--hand-loops`` of them, default 3, each in a fresh process on the CPUs bench's modes ran on:
one process is itself a draw, as bench's process sets are), and prints a table and PASS/FAIL per criterion:

1. verdicts: each mode gets the same verdict word in at least RUNS-1 of RUNS runs;
2. intervals: each run's interval holds the median of the RUNS runs' speedups (per mode);
3. hand loop: the hand loops' median speedup lies inside bench's interval, in at least RUNS-1 of RUNS
   runs (each hand loop's count is printed too).

The hand loop builds the same model and batch (ampkit's workload builder: the same seeded weights,
batch and loss), times with the clock bench's rows say they used (one thread's CPU time at one thread,
else the wall clock; the wall-clock figure is printed beside it) and trains it with torch alone
(``torch.autocast``, ``torch.amp.GradScaler`` for fp16) in its own rounds: the modes in alternating
order, a block of steps each, a round's time the fastest step of its block, the speedup the median
of the per-round paired ratios.

    python benchmarks/bench_stability.py                        # a small MLP written to a temp dir
    python benchmarks/bench_stability.py --workload cnn --steps 10
    python benchmarks/bench_stability.py --resnet18             # torchvision ResNet-18 at 64 px, batch 16

Say the load (``uptime``) with any figure: the script prints it before and after.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time

SMALL = '''
import torch.nn as nn


def small():
    return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))


def resnet18():
    import torchvision

    return torchvision.models.resnet18(num_classes=10)
'''


def burn(on_s: float, off_s: float, stop) -> None:
    """The background load: spin for ``on_s`` seconds, sleep ``off_s``, until ``stop`` is set."""
    while not stop.is_set():
        t = time.perf_counter()
        x = 0
        while time.perf_counter() - t < on_s and not stop.is_set():
            for i in range(20000):
                x += i * i
        stop.wait(off_s)


class Load:
    def __init__(self, procs: int, on_s: float, off_s: float):
        ctx = multiprocessing.get_context("spawn")
        self.stop = ctx.Event()
        self.procs = [ctx.Process(target=burn, args=(on_s, off_s, self.stop), daemon=True) for _ in range(procs)]

    def __enter__(self):
        for p in self.procs:
            p.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for p in self.procs:
            p.join(10)
            if p.is_alive():
                p.kill()
        return False


def uptime() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def bench_run(args, cwd: str, out: str) -> dict:
    cmd = [sys.executable, "-m", "ampkit", "bench", "--framework", "torch", "--device", "cpu", "--modes", args.modes,
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--json", out]
    cmd += ["--model", args.model] if args.model else ["--workload", args.workload]
    if args.batch_size:
        cmd += ["--batch-size", str(args.batch_size)]
    if args.input_shape:
        cmd += ["--input-shape", args.input_shape]
    if args.image_size:
        cmd += ["--image-size", str(args.image_size)]
    cmd += args.bench_args.split()
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if r.returncode not in (0, 1):
        raise SystemExit(f"bench failed ({r.returncode}):\n{r.stderr[-3000:]}")
    with open(out) as f:
        return json.load(f)


def hand_loop(args, cwd: str, threads: int, batch: int, modes: list[str], clock: str = "wall") -> dict[str, float]:
    """The same model, batch, threads and clock, trained by hand in interleaved rounds; per mode the
    median of the per-round (fp32 round time / mode round time). ``clock``: what bench's rows say they
    timed with (``thread_cpu``: ``time.thread_time``, one thread's CPU time; else ``time.perf_counter``)."""
    import torch

    sys.path.insert(0, cwd)
    from ampkit.backends.torch.workloads import build_workload

    torch.set_num_threads(threads)
    cpu = torch.device("cpu")
    shape = tuple(int(x) for x in args.input_shape.split(",")) if args.input_shape else None
    state = {}
    for mode in modes:
        wl = build_workload(None if args.model else args.workload, args.model, shape, 10, cpu, seed=0,
                            image_size=args.image_size)
        data = wl.make_batch(batch, cpu, torch.Generator().manual_seed(1))
        opt = torch.optim.AdamW(wl.model.parameters(), lr=wl.lr)
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(mode)
        scaler = torch.amp.GradScaler("cpu") if mode == "fp16" else None
        state[mode] = (wl, data, opt, dtype, scaler)

    def step(mode):
        wl, data, opt, dtype, scaler = state[mode]
        with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = wl.loss(data)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        opt.zero_grad(set_to_none=True)

    for mode in modes:
        for _ in range(max(1, args.warmup)):
            step(mode)
    rounds = min(args.steps // 2, 10) if args.steps >= 4 else args.steps
    block = max(1, args.steps // rounds)
    times = {m: [] for m in modes}
    now = time.thread_time if clock == "thread_cpu" else time.perf_counter
    for r in range(rounds):
        for mode in (modes if r % 2 == 0 else modes[::-1]):
            ts = []
            for _ in range(block):
                t = now()
                step(mode)
                ts.append(now() - t)
            times[mode].append(min(ts))
    out = {}
    for mode in modes:
        ratios = [math.log(b / m) for b, m in zip(times["fp32"], times[mode])]
        out[mode] = math.exp(statistics.median(ratios))
    return out


def hand_child(args, cwd: str, threads: int, batch: int, modes: list[str], clock: str, cpus) -> dict[str, float]:
    """:func:`hand_loop` in a fresh process on ``cpus`` (bench's modes' CPUs): per mode its speedup on
    bench's clock, and on the wall clock under ``mode + ':wall'`` (a second loop in the same process)."""
    job = json.dumps({"args": vars(args), "cwd": cwd, "threads": threads, "batch": batch, "modes": modes,
                      "clock": clock, "cpus": cpus})
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--hand-loop-child", job], capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise SystemExit(f"hand loop failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _hand_loop_main(job: str) -> int:
    j = json.loads(job)
    if j["cpus"] and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, j["cpus"])
    args = argparse.Namespace(**j["args"])
    got = hand_loop(args, j["cwd"], j["threads"], j["batch"], j["modes"], j["clock"])
    wall = hand_loop(args, j["cwd"], j["threads"], j["batch"], j["modes"], "wall") if j["clock"] != "wall" else got
    print(json.dumps({**got, **{m + ":wall": v for m, v in wall.items()}}))
    return 0


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--hand-loop-child":
        return _hand_loop_main(sys.argv[2])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="MODULE:FACTORY (default: the script's small MLP)")
    p.add_argument("--workload", default=None, help="a built-in workload instead (mlp, cnn)")
    p.add_argument("--resnet18", action="store_true", help="torchvision ResNet-18 at 64 px, batch 16")
    p.add_argument("--input-shape", default=None)
    p.add_argument("--image-size", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--modes", default="fp32,bf16,fp16")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--hand-loops", type=int, default=3, help="hand loops, each in a fresh process (default 3)")
    p.add_argument("--bench-args", default="", help="more flags for every bench run, e.g. '--repeats 2'")
    p.add_argument("--load-procs", type=int, default=1)
    p.add_argument("--load-on", type=float, default=3.0)
    p.add_argument("--load-off", type=float, default=3.0)
    args = p.parse_args()
    if args.resnet18:
        args.model, args.input_shape, args.batch_size = "stability_models:resnet18", "3,64,64", args.batch_size or 16
    elif not args.model and not args.workload:
        args.model, args.input_shape, args.batch_size = "stability_models:small", "256", args.batch_size or 64
    modes = args.modes.split(",")
    cwd = tempfile.mkdtemp(prefix="bench_stability_")
    with open(os.path.join(cwd, "stability_models.py"), "w") as f:
        f.write(SMALL)
    print(f"before: {uptime()}; load: {args.load_procs} process(es), {args.load_on:g} s on / {args.load_off:g} s off")
    docs = []
    with Load(args.load_procs, args.load_on, args.load_off):
        for i in range(args.runs):
            t0 = time.perf_counter()
            docs.append(bench_run(args, cwd, os.path.join(cwd, f"run{i}.json")))
            print(f"run {i + 1}: {time.perf_counter() - t0:.0f} s, {uptime()}", flush=True)
        threads = int(docs[0]["environment"].get("cpu", {}).get("threads") or 1)
        batch = next(r["batch_size"] for r in docs[0]["results"] if r["status"] == "ok")
        clock = next((r.get("clock") for r in docs[0]["results"] if r.get("clock")), "wall")
        cpus = next((r.get("cpus") for r in docs[0]["results"] if r.get("cpus")), None)
        loops = [hand_child(args, cwd, threads, batch, modes, clock, cpus) for _ in range(args.hand_loops)]
    hand = {m: statistics.median(h[m] for h in loops) for m in modes}
    print(f"after: {uptime()}; bench threads {threads}, batch {batch}, clock {clock}, pairing {docs[0].get('pairing')}, "
          f"processes per mode {next((r.get('processes') for r in docs[0]['results'] if r.get('processes')), 1)}")
    for m in modes:
        if m != "fp32":
            own = ", ".join(f"{h[m]:.3f}x" for h in loops)
            wall = ", ".join(f"{h[m + ':wall']:.3f}x" for h in loops)
            print(f"hand loop {m}: {own} in {len(loops)} fresh processes on CPUs {cpus} (bench's clock; "
                  f"wall clock: {wall}); median {hand[m]:.3f}x")
    what = args.model or args.workload
    print(f"\n{what}: {args.steps} steps after {args.warmup} warm-up, {args.runs} runs\n")
    print(f"{'run':>4} {'mode':>5} {'speedup':>8} {'interval':>16} {'verdict':>26}  load change")
    rows = {m: [] for m in modes}
    for i, doc in enumerate(docs):
        spread = (doc.get("load_change") or {}).get("spread")
        for r in doc["results"]:
            if r["mode"] == "fp32" or r["mode"] not in rows:
                continue
            rows[r["mode"]].append(r)
            ci = r.get("speedup_ci")
            ci_s = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "—"
            sp = r.get("speedup_vs_fp32")
            print(f"{i + 1:>4} {r['mode']:>5} {sp if sp is None else f'{sp:.3f}':>8} {ci_s:>16} "
                  f"{str(r.get('speedup_verdict') or r['status']):>26}  {f'{spread:.2f}x' if spread else '-'}")
    need = args.runs - 1
    ok_all = True
    print()
    for mode, rs in rows.items():
        if mode == "fp32":
            continue
        words = [r.get("speedup_verdict") or r["status"] for r in rs]
        top = max(set(words), key=words.count)
        speeds = [r["speedup_vs_fp32"] for r in rs if r.get("speedup_vs_fp32")]
        med = statistics.median(speeds) if speeds else None
        holds = [bool(r.get("speedup_ci") and med is not None and r["speedup_ci"][0] <= med <= r["speedup_ci"][1])
                 for r in rs]
        h = hand.get(mode)
        inside = [bool(r.get("speedup_ci") and r["speedup_ci"][0] <= h <= r["speedup_ci"][1]) for r in rs]
        each = [sum(bool(r.get("speedup_ci") and r["speedup_ci"][0] <= x[mode] <= r["speedup_ci"][1]) for r in rs)
                for x in loops]
        print(f"{mode:>5}: each hand loop inside {', '.join(map(str, each))} of {len(rs)} intervals")
        checks = [(f"verdict '{top}' in {words.count(top)} of {len(words)} runs", words.count(top) >= need),
                  (f"{sum(holds)} of {len(rs)} intervals hold the median speedup {med:.3f}" if med else "no speedup",
                   all(holds) and med is not None),
                  (f"hand loop (median of {len(loops)}) {h:.3f}x inside {sum(inside)} of {len(rs)} intervals",
                   sum(inside) >= need)]
        for text, ok in checks:
            ok_all &= ok
            print(f"{mode:>5}: {'PASS' if ok else 'FAIL'}  {text}")
    print(f"\n{'PASS' if ok_all else 'FAIL'} overall ({what})")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
