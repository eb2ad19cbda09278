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


def matmul_shapes(workload: Workload, batch_size: int, limit: int = 12) -> list[dict] | None:
    """The matmuls of one training step at ``batch_size`` as ``{"m", "n", "k", "calls"}`` (largest
    first), recorded on the meta device (no arithmetic): ``mm``/``addmm``/``bmm`` as they are,
    convolutions as the implicit GEMM they run (m = batch x output pixels, n = output channels, k =
    input channels x kernel). What bench compares with the doctor's ``speedup_by_size``
    (:mod:`ampkit.bench.doctor_check`). None when the model does not run on meta tensors."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: dict[tuple[int, int, int], int] = {}

    class _Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            try:
                if name in ("mm", "addmm", "bmm"):
                    a, b = (args[1], args[2]) if name == "addmm" else (args[0], args[1])
                    batch = a.shape[0] if name == "bmm" else 1
                    mnk = (batch * a.shape[-2], b.shape[-1], a.shape[-1])
                elif name == "convolution":
                    w = args[1]
                    mnk = (out.shape[0] * out[0, 0].numel(), w.shape[0], w[0].numel())
                else:
                    return out
                key = tuple(int(d) for d in mnk)
                seen[key] = seen.get(key, 0) + 1
            except Exception:  # a shape this reading does not know: left out, never fatal
                pass
            return out

    try:
        device = torch.device("meta")
        model = copy.deepcopy(workload.model).to(device).float()
        probe = Workload(model, workload.make_batch, workload.loss_fn)
        batch = probe.make_batch(batch_size, device, torch.Generator().manual_seed(0))
        with _Record():
            probe.loss(batch).backward()
    except Exception:
        return None
    shapes = sorted(seen.items(), key=lambda kv: -(kv[0][0] * kv[0][1] * kv[0][2]))[:limit]
    return [{"m": m, "n": n, "k": k, "calls": c} for (m, n, k), c in shapes] or None
