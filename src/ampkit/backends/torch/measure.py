"""One measured training run: a mode, a batch size, warm-up excluded, peak memory tracked.

A full training step goes through ``ampkit.MixedPrecision`` (autocast, backward, GradScaler in
fp16, optimizer step), so the figures include the scaler's cost (TorchBench's AMP does not).
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass

import torch

from ...bench.memory import HostPeak, rss_bytes
from ...timing import step_ms_summary
from .engine import MixedPrecision
from .timing import synchronize
from .workloads import Workload


class PeakMemory:
    """Peak memory over a region.

    CUDA: ``torch.cuda.max_memory_allocated`` after a reset (absolute: weights included).
    CPU: the host poller (:class:`ampkit.bench.memory.HostPeak`), above ``baseline``.
    """

    def __init__(self, device: torch.device, baseline: int = 0):
        self.device = device
        self._host = None if device.type == "cuda" else HostPeak(baseline)
        self.source = "torch.cuda.max_memory_allocated" if self._host is None else HostPeak.source
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
        if self._host is not None:
            self._host.__exit__(*exc)
            self.peak = self._host.peak
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
    breakdown: object = None        # --explain: the profiled steps' Breakdown (ampkit.bench.breakdown)

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


def measure(workload: Workload, mode: str, device: torch.device, batch_size: int, *, steps: int, warmup: int,
            seed: int = 0, baseline_rss: int = 0, mp: MixedPrecision | None = None,
            on_step=None, profile=None) -> Measurement:
    """Train ``steps`` timed steps (after ``warmup`` untimed ones) on one fixed batch.

    Counts the steps the loss scaler skipped in the warm-up and in the timed window apart, and
    keeps the first step's loss (read at the end: no extra sync inside the timed window). The
    optimizer (AdamW) is created here, so its state counts in the peak. CUDA steps are timed
    with events and one synchronize at the end; CPU steps with perf_counter.
    ``profile(step)`` (``--explain``): called after the timed window and the peak-memory region,
    with a callable that runs one more training step (nothing here imports the profiler).
    Raises whatever the step raises (OOM included); the caller classifies it.
    """
    model = workload.model
    mp = mp or MixedPrecision(mode, device, model=model)
    gen = torch.Generator().manual_seed(seed + 1)
    cuda = device.type == "cuda"
    breakdown = None
    with PeakMemory(device, baseline=baseline_rss) as mem:
        batch = workload.make_batch(batch_size, device, gen)
        opt = torch.optim.AdamW(model.parameters(), lr=workload.lr)
        times: list[float] = []
        events = []
        skipped_before = 0
        loss = first = None
        try:
            for i in range(warmup + steps):
                if i == warmup:
                    synchronize(device)  # host-device sync: the timed window starts clean
                    skipped_before = mp.stats["skipped"]  # every skip so far was in the warm-up
                timed = i >= warmup
                if timed:
                    if cuda:
                        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        start.record()
                    else:
                        t0 = time.perf_counter()
                with mp.autocast():
                    loss = workload.loss(batch)
                if i == 0:
                    first = loss.detach().clone()
                mp.backward(loss)
                mp.step(opt, zero_grad=True)
                if timed:
                    if cuda:
                        end.record()
                        events.append((start, end))
                    else:
                        times.append(time.perf_counter() - t0)
                if on_step is not None:
                    on_step(i + 1, warmup + steps)
            synchronize(device)  # one sync at the end of the timed window
            if cuda:
                times = [s.elapsed_time(e) / 1e3 for s, e in events]
            final_loss = float(loss.detach())
            first_loss = float(first)
            skipped = mp.stats["skipped"] - skipped_before
            if profile is not None:
                mem.__exit__(None, None, None)  # the peak ends here: the profiler's own memory stays out

                def one_step(batch=batch, opt=opt):
                    with mp.autocast():
                        out = workload.loss(batch)
                    mp.backward(out)
                    mp.step(opt, zero_grad=True)
                breakdown = profile(one_step)
        finally:
            del batch, loss, first
            opt.zero_grad(set_to_none=True)
            del opt
    return Measurement(batch_size, times, mem.peak, mem.source, skipped, final_loss,
                       warmup_skipped_steps=skipped_before, first_loss=first_loss, breakdown=breakdown)


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
