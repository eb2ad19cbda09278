"""Training FLOPs per sample, counted once with torch's own FLOP counter."""

from __future__ import annotations

import copy

import torch

from .base import Workload


def _count(workload: Workload, device: torch.device, batch_size: int) -> float | None:
    from torch.utils.flop_counter import FlopCounterMode

    model = copy.deepcopy(workload.model).to(device).float()
    probe = Workload(model, workload.make_batch, workload.loss_fn)
    batch = probe.make_batch(batch_size, device, torch.Generator().manual_seed(0))
    counter = FlopCounterMode(display=False)
    with counter:
        probe.loss(batch).backward()
    total = counter.get_total_flops()
    return float(total) / batch_size if total else None


def count_training_flops(workload: Workload, batch_size: int = 2, *, strict: bool = False) -> float | None:
    """FLOPs of forward + backward per sample (matmuls/convs/attention, as torch counts them).

    Counts on the meta device first (no arithmetic at all, well under a second even for GPT-2);
    falls back to a float32 CPU run for models that cannot run on meta tensors. Works on a copy,
    so the caller's model is untouched. None when the model cannot be counted; with ``strict``,
    the CPU run's exception propagates (the model does not run on its own inputs).
    """
    try:
        return _count(workload, torch.device("meta"), batch_size)
    except Exception:
        pass
    try:
        return _count(workload, torch.device("cpu"), batch_size)
    except Exception:
        if strict:
            raise
        return None
