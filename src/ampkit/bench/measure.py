"""One measured training run: a mode, a batch size, warm-up excluded, peak memory tracked.

A full training step goes through ``ampkit.MixedPrecision`` (autocast, backward, GradScaler in
fp16, optimizer step), so the figures include the scaler's cost (TorchBench's AMP does not).
"""

from __future__ import annotations

import gc
import os
import threading
import time
from dataclasses import dataclass

import torch

from ..engine import MixedPrecision
from ..timing import percentile, synchronize
from ..workloads.base import Workload


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, (MemoryError,)) or type(exc).__name__ == "OutOfMemoryError":
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text
                                              or "cannot allocate memory" in text)


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """Resident set size of this process: /proc/self/statm where it exists (cheap), else psutil."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        import psutil

        return int(psutil.Process().memory_info().rss)


class PeakMemory:
    """Peak memory over a region.

    CUDA: ``torch.cuda.max_memory_allocated`` after a reset (absolute: weights included).
    CPU: resident set size sampled every ``interval_s`` (10 ms) by a thread, minus ``baseline`` (the
    RSS before the model was built), so it too counts weights, optimizer state and activations.
    """

    def __init__(self, device: torch.device, baseline: int = 0, interval_s: float = 0.01):
        self.device = device
        self.baseline = baseline
        self.interval_s = interval_s
        self.peak = 0
        self.source = "torch.cuda.max_memory_allocated" if device.type == "cuda" else "process RSS above baseline"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _poll(self) -> None:
        # every 10 ms, like optimum-benchmark's poller: often enough for the activations of a
        # training step, rarely enough not to slow the step it measures (2 ms cost ~3% here)
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes())
            self._stop.wait(self.interval_s)

    def __enter__(self) -> "PeakMemory":
        if self.device.type == "cuda":
            synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self.peak = rss_bytes()
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> bool:
        if self.device.type == "cuda":
            synchronize(self.device)
            self.peak = int(torch.cuda.max_memory_allocated(self.device))
        else:
            self._stop.set()
            self._thread.join()
            self.peak = max(self.peak, rss_bytes())
            self.peak = max(0, self.peak - self.baseline)
        return False


@dataclass
class Measurement:
    batch_size: int
    step_s: list[float]
    peak_memory_bytes: int
    memory_source: str
    skipped_steps: int
    final_loss: float

    @property
    def samples_per_s(self) -> float:
        return self.batch_size * len(self.step_s) / sum(self.step_s)

    @property
    def step_ms(self) -> dict:
        ms = [s * 1e3 for s in self.step_s]
        return {"p50": percentile(ms, 50), "p90": percentile(ms, 90), "mean": sum(ms) / len(ms),
                "min": min(ms), "max": max(ms)}


def free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def measure(workload: Workload, mode: str, device: torch.device, batch_size: int, *, steps: int, warmup: int,
            seed: int = 0, baseline_rss: int = 0, mp: MixedPrecision | None = None,
            on_step=None) -> Measurement:
    """Train ``steps`` timed steps (after ``warmup`` untimed ones) on one fixed batch.

    The optimizer (AdamW) is created here, so its state counts in the peak. CUDA steps are timed
    with events and one synchronize at the end; CPU steps with perf_counter.
    Raises whatever the step raises (OOM included); the caller classifies it.
    """
    model = workload.model
    mp = mp or MixedPrecision(mode, device, model=model)
    gen = torch.Generator().manual_seed(seed + 1)
    cuda = device.type == "cuda"
    with PeakMemory(device, baseline=baseline_rss) as mem:
        batch = workload.make_batch(batch_size, device, gen)
        opt = torch.optim.AdamW(model.parameters(), lr=workload.lr)
        times: list[float] = []
        events = []
        skipped_before = 0
        loss = None
        try:
            for i in range(warmup + steps):
                if i == warmup:
                    synchronize(device)  # host-device sync: the timed window starts clean
                    skipped_before = mp.stats["skipped"]
                timed = i >= warmup
                if timed:
                    if cuda:
                        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        start.record()
                    else:
                        t0 = time.perf_counter()
                with mp.autocast():
                    loss = workload.loss(batch)
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
            skipped = mp.stats["skipped"] - skipped_before
        finally:
            del batch, loss
            opt.zero_grad(set_to_none=True)
            del opt
    return Measurement(batch_size, times, mem.peak, mem.source, skipped, final_loss)
