"""``ampkit bench`` for PyTorch: one mode per fresh child process (or per torchrun rank, under DDP).

Build the workload, find the batch size, measure through ``ampkit.MixedPrecision`` (so fp16
includes GradScaler's cost), fill the row. Every failure becomes the row's status, never a crash.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from ...bench.config import BenchConfig
from ...bench.memory import is_oom, rss_bytes
from ...bench.repeats import apply_auto, mark_auto
from ...bench.report import BenchReport, BenchRow, derive_relative
from ...bench.runner import (
    check_final_loss,
    describe_failure,
    fill_flops,
    fill_timing,
    run_modes,
    search_batch,
    serve_row,
)
from ...errors import AutocastDisabledError, ModeUnavailableError, UsageError
from .devices import mode_support, resolve_auto, resolve_device
from .engine import MixedPrecision
from .environment import torch_environment
from .measure import free_memory, measure
from .workloads import build_workload, check_builtin, default_workload
from .workloads.flops import count_training_flops


def _build(cfg: BenchConfig, device: torch.device):
    return build_workload(cfg.workload, cfg.model, cfg.input_shape, cfg.num_classes, device, seed=cfg.seed,
                          seq_len=cfg.seq_len, image_size=cfg.image_size)


def sample_shapes(inputs):
    """Per-sample shapes of a batch's inputs (batch dimension dropped): a list, or a dict/list of them."""
    if isinstance(inputs, torch.Tensor):
        return list(inputs.shape[1:])
    if isinstance(inputs, dict):
        return {k: sample_shapes(v) for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    if isinstance(inputs, (tuple, list)):
        return [sample_shapes(v) for v in inputs if isinstance(v, torch.Tensor)]
    return None


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    from ...cpu import cpu_info

    return cpu_info()["model"]


def run_mode(cfg: BenchConfig, mode: str, device: torch.device, *, flops: float | None,
             progress=None, ddp: bool = False) -> BenchRow:
    row = BenchRow(mode, steps=cfg.steps)
    say = progress or (lambda *a: None)
    try:
        row.device_name = device_name(device)
        ok, why = mode_support(mode, device)
        if not ok:
            row.status, row.error = "unsupported", why
            return row
        baseline = _rss_baseline(mode, device) if device.type == "cpu" else 0
        workload = _build(cfg, device)
        if ddp:
            from torch.nn.parallel import DistributedDataParallel

            ids = [device.index] if device.type == "cuda" else None
            workload.model = DistributedDataParallel(workload.model, device_ids=ids)
        batch_size = cfg.batch_size or workload.batch_size
        if batch_size == "auto":
            batch_size = _search(cfg, workload, mode, device, baseline, row, say)
            if batch_size is None:
                return row
        mp = MixedPrecision(mode, device, model=workload.model)
        m = measure(workload, mode, device, batch_size, steps=cfg.steps, warmup=cfg.warmup, seed=cfg.seed,
                    baseline_rss=baseline, mp=mp, on_step=lambda done, total: say("step", done, total))
        fill_timing(row, batch_size, m.step_s, flops, gpu=device.type == "cuda", warmup=cfg.warmup,
                    skipped=m.skipped_steps, warmup_skipped=m.warmup_skipped_steps, first_loss=m.first_loss)
        row.peak_memory_bytes, row.memory_source = m.peak_memory_bytes, m.memory_source
        check_final_loss(row, m.final_loss, cfg)
    except (ModeUnavailableError, AutocastDisabledError) as exc:
        row.status, row.error = "unsupported", str(exc)
    except UsageError:
        raise
    except Exception as exc:
        row.status = "oom" if is_oom(exc) else "error"
        row.error = describe_failure(exc)
    finally:
        free_memory(device)
    return row


def _rss_baseline(mode: str, device: torch.device) -> int:
    """RSS after a throwaway step of a tiny model in the same mode.

    torch loads kernels and libraries lazily on the first autocast/backward/optimizer step
    (over 100 MiB on a CPU); that is not the workload's memory, so it goes into the baseline.
    """
    import gc

    tiny = torch.nn.Linear(8, 8).to(device)
    mp = MixedPrecision(mode, device)
    opt = torch.optim.AdamW(tiny.parameters())
    with mp.autocast():
        loss = tiny(torch.randn(2, 8, device=device)).float().sum()
    mp.backward(loss)
    mp.step(opt, zero_grad=True)
    del tiny, opt, loss, mp
    gc.collect()
    return rss_bytes()


def _search(cfg, workload, mode, device, baseline, row, say) -> int | None:
    """Largest batch that fits, each trial a short run in this process (torch returns its memory)."""
    initial = {k: v.detach().to("cpu", copy=True) for k, v in workload.model.state_dict().items()}

    def trial(b: int) -> tuple[bool, int | None]:
        try:
            m = measure(workload, mode, device, b, steps=2, warmup=1, seed=cfg.seed, baseline_rss=baseline)
            return True, m.peak_memory_bytes
        except Exception as exc:
            if not is_oom(exc):
                raise
            return False, None
        finally:
            free_memory(device)

    best = search_batch(row, trial, workload.batch_size, cfg.search_cap, cfg.memory_budget, say)
    workload.model.load_state_dict(initial)  # measure from the same initial weights as other modes
    return best


def child_entry(conn, cfg_dict: dict, mode: str, device_str: str, flops: float | None) -> None:
    """Entry of the per-mode PyTorch child process."""
    serve_row(conn, mode, lambda progress: run_mode(BenchConfig.from_dict(cfg_dict), mode, torch.device(device_str),
                                                    flops=flops, progress=progress))


def _prepare(cfg: BenchConfig, device: torch.device) -> tuple[str | None, float | None, str, object]:
    """Validate the workload in the parent (bad input -> exit 2 before any child) and count FLOPs.
    Returns (note, FLOPs per sample, the workload's name, per-sample input shapes)."""
    note = None
    if not cfg.model and not cfg.workload:
        cfg.workload = default_workload(device)
        note = f"no --workload given: ran the default for a {device.type.upper()} device, {cfg.workload!r}"
    if cfg.workload:
        cfg.workload = check_builtin(cfg.workload)
    if cfg.batch_size == "auto" and device.type != "cuda" and cfg.memory_budget is None:
        raise UsageError("on a CPU, --batch-size auto needs --memory-budget SIZE (there is no out-of-memory "
                         "error to stop at); e.g. --memory-budget 2GiB")
    workload = _build(cfg, torch.device("cpu"))
    if cfg.model:  # a user's model must run on its own inputs: probe a batch of 2 (meta, else CPU)
        try:
            counted = count_training_flops(workload, strict=True)
            probe = workload.make_batch(2, torch.device("cpu"), torch.Generator().manual_seed(cfg.seed))
            with torch.no_grad():  # the meta-device count checks shapes, not values (a class index too large)
                workload.loss(probe)
        except Exception as exc:
            shape = f" with --input-shape {','.join(map(str, cfg.input_shape))}" if cfg.input_shape else ""
            raise UsageError(f"{cfg.model} failed a training step on a probe batch of 2{shape} and "
                             f"--num-classes {cfg.num_classes or 10}: "
                             f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        flops = workload.flops_per_sample or counted
    else:
        flops = workload.flops_per_sample or count_training_flops(workload)
        probe = workload.make_batch(1, torch.device("cpu"), torch.Generator().manual_seed(cfg.seed))
    try:
        shapes = sample_shapes(probe[0])
    except Exception:  # a user's batch of another shape: the shapes are information, not a check
        shapes = None
    return note, flops, workload.name, shapes


def _prepare_isolated(cfg_dict: dict, device_str: str) -> tuple:
    """:func:`_prepare` in a child process (see :mod:`ampkit.isolation`): a user's model is imported
    and probed where a crash, sys.exit or a hang cannot take the parent down."""
    cfg = BenchConfig.from_dict(cfg_dict)
    return (*_prepare(cfg, torch.device(device_str)), cfg.workload)


def prepare(cfg: BenchConfig, device: torch.device) -> tuple[str | None, float | None, str, object]:
    """Built-in workloads are probed here; a user's ``--model`` in a child process."""
    if not cfg.model:
        return _prepare(cfg, device)
    from ...isolation import run_isolated

    note, flops, name, shapes, cfg.workload = run_isolated(_prepare_isolated, cfg.to_dict(), str(device),
                                                           what=f"probing --model {cfg.model}", timeout=cfg.timeout)
    return note, flops, name, shapes


def run_bench(cfg: BenchConfig, progress: Callable[[dict], None] | None = None,
              on_row: Callable[[BenchRow], None] | None = None) -> BenchReport:
    """Run the bench; Ctrl-C stops it and returns the rows that finished (``interrupted`` set)."""
    cfg.validate()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return _run_distributed(cfg, progress, on_row)
    device = resolve_device(cfg.device)
    apply_auto(cfg, lambda: resolve_auto(device))
    note, flops, name, shapes = prepare(cfg, device)
    rows, interrupted = run_modes(cfg, str(device), flops, progress, on_row, target=child_entry)
    return BenchReport(workload=name, device=str(device), results=rows, environment=torch_environment(device),
                       flops_per_sample=flops, config=cfg.to_dict(), note=note, interrupted=interrupted,
                       sample_inputs=shapes)


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
        # a rank that fails or dies must end the run on every rank: a collective waits at most this long
        from datetime import timedelta

        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                timeout=timedelta(seconds=cfg.timeout or 1800.0))
    world = dist.get_world_size()
    apply_auto(cfg, lambda: resolve_auto(device))
    note, flops, name, shapes = prepare(cfg, device)
    rows = []
    for mode in cfg.modes:
        row = run_mode(cfg, mode, device, flops=flops, ddp=True,
                       progress=(lambda kind, done, total, _m=mode: progress({"mode": _m, "kind": kind, "done": done,
                                                                           "total": total})) if progress else None)
        # global figures: the slowest rank sets the pace; memory is the largest rank's
        t = torch.tensor([(row.batch_size or 0) / row.samples_per_s if row.samples_per_s else float("inf"),
                          float(row.peak_memory_bytes or 0), 1.0 if row.status == "ok" else 0.0], dtype=torch.float64)
        flags = t.clone()
        try:
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            dist.all_reduce(flags, op=dist.ReduceOp.MIN)
        except Exception as exc:  # another rank failed or died: end this rank too, with a message
            raise UsageError(f"rank {dist.get_rank()} of {world}: another rank stopped answering during {mode} "
                             f"({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}); "
                             "see the other ranks' messages") from None
        if row.status == "ok" and flags[2] > 0:
            row.samples_per_s = (row.batch_size * world) / float(t[0])
            row.peak_memory_bytes = int(t[1])
            fill_flops(row, flops, device.type == "cuda", world)
        rows.append(row)
        if on_row and dist.get_rank() == 0:
            on_row(row)
    derive_relative(rows)
    mark_auto(rows, cfg)
    return BenchReport(workload=name, device=str(device), results=rows, environment=torch_environment(device),
                       world_size=world, flops_per_sample=flops, config=cfg.to_dict(), note=note, sample_inputs=shapes)


class TorchBench:
    """torch/bench's operations for the neutral driver (being written: issue #21)."""
