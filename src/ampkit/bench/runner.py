"""Run every requested mode on the same workload and batch, one fresh child process per mode."""

from __future__ import annotations

import json
import multiprocessing
import os
from typing import Callable

import torch

from ..devices import resolve_device
from ..environment import torch_environment
from ..errors import UsageError
from ..workloads.builtin import check_builtin, default_workload
from ..workloads.flops import count_training_flops
from .config import BenchConfig
from .peaks import peak_tflops
from .report import BenchReport, BenchRow, derive_relative
from .worker import build_workload, child_entry, run_mode

# Large allocations are mmapped and returned on free, so a child's RSS falls after each trial
# of --batch-size auto and peaks measured by RSS do not carry over (glibc's dynamic threshold
# would otherwise keep freed blocks on the heap).
_CHILD_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def _prepare(cfg: BenchConfig, device: torch.device) -> tuple[str | None, float | None, str]:
    """Validate the workload in the parent (bad input -> exit 2 before any child) and count FLOPs."""
    note = None
    if not cfg.model and not cfg.workload:
        cfg.workload = default_workload(device)
        note = f"no --workload given: ran the default for a {device.type.upper()} device, {cfg.workload!r}"
    if cfg.workload:
        cfg.workload = check_builtin(cfg.workload)
    if cfg.batch_size == "auto" and device.type != "cuda" and cfg.memory_budget is None:
        raise UsageError("on a CPU, --batch-size auto needs --memory-budget SIZE (there is no out-of-memory "
                         "error to stop at); e.g. --memory-budget 2GiB")
    workload = build_workload(cfg, torch.device("cpu"))
    if cfg.model:  # a user's model must run on its own inputs: probe a batch of 2 (meta, else CPU)
        try:
            counted = count_training_flops(workload, strict=True)
        except Exception as exc:
            shape = f" with --input-shape {','.join(map(str, cfg.input_shape))}" if cfg.input_shape else ""
            raise UsageError(f"{cfg.model} failed a training step on a probe batch of 2{shape}: "
                             f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        flops = workload.flops_per_sample or counted
    else:
        flops = workload.flops_per_sample or count_training_flops(workload)
    return note, flops, workload.name


def run_bench(cfg: BenchConfig, progress: Callable[[dict], None] | None = None,
              on_row: Callable[[BenchRow], None] | None = None) -> BenchReport:
    """Run the bench; Ctrl-C stops it and returns the rows that finished (``interrupted`` set)."""
    cfg.validate()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return _run_distributed(cfg, progress, on_row)
    device = resolve_device(cfg.device)
    note, flops, name = _prepare(cfg, device)
    rows, interrupted = run_modes(cfg, str(device), flops, progress, on_row)
    return BenchReport(workload=name, device=str(device), results=rows, environment=torch_environment(device),
                       flops_per_sample=flops, config=cfg.to_dict(), note=note, interrupted=interrupted)


def run_modes(cfg: BenchConfig, device: str, flops, progress, on_row, target=child_entry,
              run_one=None) -> tuple[list, bool]:
    """Every requested mode in turn, each in a fresh child (or ``run_one(mode)``, which may use
    several); Ctrl-C keeps the rows that finished."""
    rows: list[BenchRow] = []
    interrupted = False
    try:
        for mode in cfg.modes:
            row = run_one(mode) if run_one else run_child(cfg, mode, device, flops, progress, target)
            rows.append(row)
            if on_row:
                on_row(row)
    except KeyboardInterrupt:
        interrupted = True
    derive_relative(rows)
    return rows, interrupted


def run_child(cfg: BenchConfig, mode: str, device: str, flops, progress, target=child_entry) -> BenchRow:
    """Run one mode in a fresh spawned process; ``target(conn, cfg_dict, mode, device, flops)`` sends
    JSON messages (progress, then the row). A worker that dies yields an error/oom row."""
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=target, args=(send, cfg.to_dict(), mode, str(device), flops), daemon=True)
    saved = {k: os.environ.get(k) for k in _CHILD_ENV}
    os.environ.update(_CHILD_ENV)
    try:
        proc.start()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    send.close()
    row = None
    try:
        while row is None:
            if recv.poll(0.1):
                try:
                    msg = json.loads(recv.recv_bytes())
                except EOFError:
                    break
                if msg["type"] == "result":
                    row = BenchRow.from_dict(msg["row"])
                elif progress:
                    progress({"mode": mode, **msg})
            elif not proc.is_alive() and not recv.poll(0):
                break
    except KeyboardInterrupt:
        proc.terminate()
        proc.join(5)
        raise
    proc.join(10)
    if row is None:
        code = proc.exitcode
        killed = code is not None and code < 0 and -code == 9
        row = BenchRow(mode, status="oom" if killed else "error",
                       error=("the worker was killed (SIGKILL), most likely by the out-of-memory killer"
                              if killed else f"the worker process exited with code {code} without a result"))
    return row


def _run_distributed(cfg: BenchConfig, progress, on_row) -> BenchReport:
    """Under torchrun: DDP in this process, every mode in turn; rank 0 reports global figures."""
    import torch.distributed as dist

    if cfg.batch_size == "auto":
        raise UsageError("--batch-size auto is not supported under torchrun; give a per-process --batch-size")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    want_cuda = cfg.device in ("auto", "cuda") or cfg.device.startswith("cuda")
    if want_cuda and torch.cuda.is_available():
        device = torch.device(f"cuda:{local_rank}")
        torch.cuda.set_device(device)
    else:
        device = resolve_device("cpu" if cfg.device == "auto" else cfg.device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    world = dist.get_world_size()
    note, flops, name = _prepare(cfg, device)
    rows = []
    for mode in cfg.modes:
        row = run_mode(cfg, mode, device, flops=flops, ddp=True,
                       progress=(lambda kind, done, total, _m=mode: progress({"mode": _m, "kind": kind, "done": done,
                                                                           "total": total})) if progress else None)
        # global figures: the slowest rank sets the pace; memory is the largest rank's
        t = torch.tensor([(row.batch_size or 0) / row.samples_per_s if row.samples_per_s else float("inf"),
                          float(row.peak_memory_bytes or 0), 1.0 if row.status == "ok" else 0.0], dtype=torch.float64)
        flags = t.clone()
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        dist.all_reduce(flags, op=dist.ReduceOp.MIN)
        if row.status == "ok" and flags[2] > 0:
            row.samples_per_s = (row.batch_size * world) / float(t[0])
            row.peak_memory_bytes = int(t[1])
            if flops:
                row.tflops = flops * row.samples_per_s / 1e12
                peak = peak_tflops(row.device_name, mode) if device.type == "cuda" else None
                row.mfu = row.tflops / (peak * world) if peak else None
        rows.append(row)
        if on_row and dist.get_rank() == 0:
            on_row(row)
    derive_relative(rows)
    return BenchReport(workload=name, device=str(device), results=rows, environment=torch_environment(device),
                       world_size=world, flops_per_sample=flops, config=cfg.to_dict(), note=note)
