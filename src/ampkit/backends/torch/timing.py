"""PyTorch's clocks: CUDA events with one synchronize at the end; the host clock on a CPU."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ...timing import HOST, Clock


def synchronize(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # host-device sync: only at measurement boundaries


class CudaClock:
    """Events around each call and ONE synchronize after the last (a deliberate host-device sync,
    outside the timed region)."""

    def __init__(self, device: torch.device):
        self.device = device

    def sync(self) -> None:
        synchronize(self.device)

    def time(self, fn: Callable[[], object], reps: int) -> list[float]:
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for start, end in events:
            start.record()
            fn()
            end.record()
        self.sync()
        return [start.elapsed_time(end) / 1e3 for start, end in events]


def clock_for(device: torch.device) -> Clock:
    return CudaClock(device) if device.type == "cuda" else HOST
