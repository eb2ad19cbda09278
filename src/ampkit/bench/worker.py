"""One mode of a bench run: build the workload, find the batch size, measure, fill the row.

Runs in a fresh child process per mode (so peak memory never leaks between modes), or in the
torchrun process itself under DDP. Every failure becomes the row's status, never a crash.
"""

from __future__ import annotations

import json
import math
import os

import torch

from ..devices import mode_support
from ..engine import MixedPrecision
from ..errors import AutocastDisabledError, ModeUnavailableError, UsageError
from ..workloads.base import Workload
from ..workloads.builtin import build_builtin
from ..workloads.loader import build_user_workload
from .batch_search import largest_fitting
from .config import BenchConfig
from .measure import free_memory, is_oom, measure, rss_bytes
from .peaks import peak_tflops
from .report import BenchRow


def build_workload(cfg: BenchConfig, device: torch.device) -> Workload:
    """The same initial weights in every mode: the seed is set before the model is built."""
    torch.manual_seed(cfg.seed)
    if cfg.model:
        wl = build_user_workload(cfg.model, cfg.input_shape, cfg.num_classes)
    else:
        wl = build_builtin(cfg.workload)
    wl.model.to(device)
    return wl


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    from ..devices import cpu_info

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
        workload = build_workload(cfg, device)
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
        row.batch_size = batch_size
        row.samples_per_s = m.samples_per_s
        row.step_ms = m.step_ms
        row.peak_memory_bytes = m.peak_memory_bytes
        row.memory_source = m.memory_source
        row.skipped_steps = m.skipped_steps
        row.final_loss = m.final_loss
        if flops:
            row.tflops = flops * m.samples_per_s / 1e12
            peak = peak_tflops(row.device_name, mode) if device.type == "cuda" else None
            row.mfu = row.tflops / peak if peak else None
        if not math.isfinite(m.final_loss):
            row.status = "error"
            row.error = (f"loss is {m.final_loss} after {cfg.warmup + cfg.steps} steps"
                         + (f" ({m.skipped_steps} of {cfg.steps} timed steps skipped by the loss scaler)"
                            if m.skipped_steps else ""))
    except (ModeUnavailableError, AutocastDisabledError) as exc:
        row.status, row.error = "unsupported", str(exc)
    except UsageError:
        raise
    except Exception as exc:
        row.status = "oom" if is_oom(exc) else "error"
        row.error = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:500]
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
    """Largest batch that fits (no OOM, and peak within --memory-budget when given)."""
    budget = cfg.memory_budget
    initial = {k: v.detach().to("cpu", copy=True) for k, v in workload.model.state_dict().items()}

    def fits(b: int) -> bool:
        peak, ok = None, False
        try:
            m = measure(workload, mode, device, b, steps=2, warmup=1, seed=cfg.seed, baseline_rss=baseline)
            peak = m.peak_memory_bytes
            ok = budget is None or peak <= budget
        except Exception as exc:
            if not is_oom(exc):
                raise
        finally:
            free_memory(device)
        row.search.append([b, ok, peak])
        say("search", b, None)
        return ok

    best = largest_fitting(fits, workload.batch_size, cfg.search_cap)
    workload.model.load_state_dict(initial)  # measure from the same initial weights as other modes
    if best is None:
        row.status = "oom"
        row.error = ("even batch size 1 does not fit" +
                     (f" in the memory budget of {budget} bytes" if budget else " in device memory"))
        return None
    row.max_batch_size = best
    return best


def serve_row(conn, mode: str, make_row) -> None:
    """In a bench child: ``make_row(progress)`` -> BenchRow, sent to the parent as JSON (no pickled
    results), with progress messages on the way. Any failure still sends a row."""
    def send(msg: dict) -> None:
        conn.send_bytes(json.dumps(msg).encode())

    try:
        row = make_row(lambda kind, done, total: send({"type": "progress", "kind": kind, "done": done, "total": total}))
        send({"type": "result", "row": row.to_dict()})
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # last resort: the parent still gets a row
        send({"type": "result", "row": BenchRow(mode, status="error",
                                                error=f"{type(exc).__name__}: {exc}"[:500]).to_dict()})
    finally:
        conn.close()
        os._exit(0)  # skip interpreter teardown (CUDA contexts, threads): the row is sent


def child_entry(conn, cfg_dict: dict, mode: str, device_str: str, flops: float | None) -> None:
    """Entry of the per-mode PyTorch child process."""
    serve_row(conn, mode, lambda progress: run_mode(BenchConfig.from_dict(cfg_dict), mode, torch.device(device_str),
                                                    flops=flops, progress=progress))
