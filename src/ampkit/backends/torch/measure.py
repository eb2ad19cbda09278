"""One measured training run: a mode, a batch size, warm-up excluded, peak memory tracked.

A full training step goes through ``ampkit.MixedPrecision`` (autocast, backward, GradScaler in
fp16, optimizer step), so the figures include the scaler's cost (TorchBench's AMP does not).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ...host_memory import HostPeak, rss_bytes
from ...timing import step_ms_summary
from .engine import MixedPrecision
from .timing import synchronize
from .workloads import Workload

#: How a CPU peak is measured (rows' ``memory_source``).
HOST_SOURCE = f"{HostPeak.source}, at least the bytes of the weights, optimizer state and batch"


def tensor_bytes(*trees) -> int:
    """The bytes of the distinct storages among the tensors in ``trees`` (tensors, modules,
    optimizers, and lists, tuples and dicts of them): a tensor seen twice, or two views of one
    storage, count once."""
    seen: dict[int, int] = {}

    def visit(x):
        if isinstance(x, torch.Tensor):
            try:  # a tensor without a plain storage (sparse, meta, a subclass's wrapper) adds nothing
                st = x.untyped_storage()
                seen[st.data_ptr()] = max(seen.get(st.data_ptr(), 0), st.nbytes())
            except (RuntimeError, NotImplementedError, TypeError, AttributeError):
                pass
            if x.grad is not None:
                visit(x.grad)
        elif isinstance(x, torch.nn.Module):
            for t in list(x.parameters()) + list(x.buffers()):
                visit(t)
        elif isinstance(x, torch.optim.Optimizer):
            for state in x.state.values():
                visit(state)
        elif isinstance(x, dict):
            for v in x.values():
                visit(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                visit(v)
    for tree in trees:
        visit(tree)
    seen.pop(0, None)  # empty storages
    return sum(seen.values())


class PeakMemory:
    """Peak memory over a region.

    CUDA: ``torch.cuda.max_memory_allocated`` after a reset (absolute: weights included).
    CPU: the process's peak RSS (:class:`ampkit.host_memory.HostPeak`) above ``baseline``, and never
    below ``floor()``, the bytes the region's tensors hold at its end: a process whose heap already had
    freed room (a long-lived one, or a library call after other work) can grow its RSS by less than
    the tensors it made, down to 0.
    """

    def __init__(self, device: torch.device, baseline: int = 0, floor: Callable[[], int] | None = None):
        self.device = device
        self._host = None if device.type == "cuda" else HostPeak(baseline)
        self.source = "torch.cuda.max_memory_allocated" if self._host is None else HOST_SOURCE
        self.floor = floor
        self.peak = 0
        self._done = False

    def __enter__(self) -> PeakMemory:
        if self._host is not None:
            self._host.__enter__()
        else:
            synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        return self

    def __exit__(self, *exc) -> bool:
        if self._done:  # ended early (before --explain's profiled steps): the first exit counts
            return False
        self._done = True
        floor, self.floor = self.floor, None  # read once: the region's owner is no longer held through it
        if self._host is not None:
            self._host.__exit__(*exc)
            self.peak = max(self._host.peak, floor() if floor is not None else 0)
        else:
            synchronize(self.device)
            self.peak = int(torch.cuda.max_memory_allocated(self.device))
        return False


@dataclass
class Measurement:
    batch_size: int
    step_s: list[float]
    peak_memory_bytes: int
    memory_source: str
    skipped_steps: int              # timed steps the loss scaler skipped
    final_loss: float               # the loss of the last step
    warmup_skipped_steps: int = 0   # warm-up steps the loss scaler skipped
    first_loss: float | None = None  # the loss of the first step (before any update)
    breakdown: object = None        # --explain: the profiled steps' Breakdown (ampkit.breakdown)

    @property
    def samples_per_s(self) -> float:
        """The batch over the median step time (as every bench row defines it)."""
        return self.batch_size / (self.step_ms["p50"] / 1e3)

    @property
    def step_ms(self) -> dict:
        return step_ms_summary(self.step_s)


def free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


class TrainingRun:
    """A measured training run on one fixed batch, in blocks of steps (bench's session).

    Entering starts the peak-memory region, makes the batch and the optimizer (AdamW: its state
    counts in the peak); :meth:`steps` trains a block (a CUDA block timed with events, one
    synchronize at its end); :meth:`end_peak` closes the region; :meth:`profile` runs
    ``profile(one_step)`` (``--explain``: nothing here imports the profiler). Counts the steps the
    loss scaler skipped in untimed and in timed blocks apart, and keeps the first step's loss (read
    at the end: no extra sync inside a timed block). Raises whatever a step raises (OOM included)."""

    def __init__(self, workload: Workload, mode: str, device: torch.device, batch_size: int, *, seed: int = 0,
                 baseline_rss: int = 0, mp: MixedPrecision | None = None):
        self.workload, self.device, self.batch_size, self.seed = workload, device, batch_size, seed
        self.mp = mp or MixedPrecision(mode, device, model=workload.model)
        self.mem = PeakMemory(device, baseline=baseline_rss,
                              floor=lambda: tensor_bytes(self.workload.model, self.opt, self.batch))
        self.skipped = self.warmup_skipped = 0
        self._loss = self._first = None
        self.batch = self.opt = None
        self._entered = False

    def __enter__(self) -> TrainingRun:
        self.mem.__enter__()
        self._entered = True
        self.batch = self.workload.make_batch(self.batch_size, self.device, torch.Generator().manual_seed(self.seed + 1))
        self.opt = torch.optim.AdamW(self.workload.model.parameters(), lr=self.workload.lr)
        return self

    def _step(self):
        with self.mp.autocast():
            loss = self.workload.loss(self.batch)
        self.mp.backward(loss)
        self.mp.step(self.opt, zero_grad=True)
        return loss

    @property
    def clock(self) -> str:
        """How a step is timed: ``cuda_events`` on a GPU; ``thread_cpu`` on a CPU at one thread (every
        op of the step runs on this thread, so its CPU clock is the step's compute time, to which
        another job's time slices are not counted); ``wall`` on several threads (a thread's clock
        would miss the others' work)."""
        if self.device.type == "cuda":
            return "cuda_events"
        return "thread_cpu" if torch.get_num_threads() == 1 else "wall"

    def steps(self, n: int, timed: bool, on_step=None) -> list[float]:
        cuda = self.device.type == "cuda"
        synchronize(self.device)  # the block starts clean
        before = self.mp.stats["skipped"]
        times: list[float] = []
        events = []
        now = time.thread_time if self.clock == "thread_cpu" else time.perf_counter
        for _ in range(n):
            if timed:
                if cuda:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                else:
                    t0 = now()
            self._loss = self._step()
            if self._first is None:
                self._first = self._loss.detach().clone()
            if timed:
                if cuda:
                    end.record()
                    events.append((start, end))
                else:
                    times.append(now() - t0)
            if on_step is not None:
                on_step()
        synchronize(self.device)  # one sync at the end of the block
        if cuda:
            times = [s.elapsed_time(e) / 1e3 for s, e in events]
        skipped = self.mp.stats["skipped"] - before
        if timed:
            self.skipped += skipped
        else:
            self.warmup_skipped += skipped
        return times

    @property
    def first_loss(self) -> float | None:
        return None if self._first is None else float(self._first)

    @property
    def final_loss(self) -> float:
        return float("nan") if self._loss is None else float(self._loss.detach())

    def __exit__(self, *exc) -> bool:
        self.end_peak()
        return False

    def end_peak(self) -> None:
        if self._entered:
            self.mem.__exit__(None, None, None)

    def profile(self, profile):
        """``profile(one_step)`` after the peak region (the profiler's own memory stays out)."""
        self.end_peak()
        return profile(self._step)

    def close(self) -> None:
        self.end_peak()
        if self.opt is not None:
            self.opt.zero_grad(set_to_none=True)
        self.batch = self.opt = self._loss = self._first = None


def measure(workload: Workload, mode: str, device: torch.device, batch_size: int, *, steps: int, warmup: int,
            seed: int = 0, baseline_rss: int = 0, mp: MixedPrecision | None = None, on_step=None,
            profile=None) -> Measurement:
    """Train ``steps`` timed steps (after ``warmup`` untimed ones) on one fixed batch, in one block
    (:class:`TrainingRun`); ``on_step(done, total)`` after each step."""
    run = TrainingRun(workload, mode, device, batch_size, seed=seed, baseline_rss=baseline_rss, mp=mp)
    done = [0]

    def tick():
        done[0] += 1
        if on_step is not None:
            on_step(done[0], warmup + steps)
    try:
        with run:
            run.steps(warmup, False, tick)
            times = run.steps(steps, True, tick)
            final_loss, first_loss = run.final_loss, run.first_loss
            breakdown = run.profile(profile) if profile is not None else None
            run.end_peak()
    finally:
        run.close()
    return Measurement(batch_size, times, run.mem.peak, run.mem.source, run.skipped, final_loss,
                       warmup_skipped_steps=run.warmup_skipped, first_loss=first_loss, breakdown=breakdown)


def rss_baseline(mode: str, device: torch.device) -> int:
    """RSS after a throwaway step of a tiny model in the same mode.

    torch loads kernels and libraries lazily on the first autocast/backward/optimizer step
    (over 100 MiB on a CPU); that is not the workload's memory, so it goes into the baseline.
    """
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
