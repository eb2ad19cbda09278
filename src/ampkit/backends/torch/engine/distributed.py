"""DDP and FSDP for the engine: which models are sharded, the scaler they need, gradient sync, clipping."""

from __future__ import annotations

import contextlib
import sys

import torch

__all__ = ["is_fsdp", "scaling_for_model", "no_gradient_sync", "clip_grad_norm"]


def is_fsdp(model) -> bool:
    """Whether ``model`` is sharded by FSDP1 (``FullyShardedDataParallel``) or FSDP2 (``fully_shard``)."""
    if model is None or "torch.distributed.fsdp" not in sys.modules:  # never imported: nothing is sharded by it
        return False
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
    except Exception:  # pragma: no cover - torch without distributed
        return False
    if isinstance(model, FullyShardedDataParallel):
        return True
    try:
        from torch.distributed.fsdp import FSDPModule  # FSDP2 (fully_shard)
    except Exception:
        return False
    return isinstance(model, FSDPModule)


def scaling_for_model(scaling, model, pending_backwards: int):
    """The loss scaling ``model`` needs: the sharded one for an FSDP model when scaling is on and not
    sharded yet (state carried over), else ``scaling`` as it is.

    Raises:
        RuntimeError: the switch would happen between ``backward()`` and ``step()``.
    """
    if not (scaling.shards_for_fsdp and is_fsdp(model)):
        return scaling
    if pending_backwards:
        raise RuntimeError(
            "prepare() with an FSDP model was called between backward() and step(); "
            "call it before the first backward() of a step (best: right after creating the model)"
        )
    return scaling.sharded()


@contextlib.contextmanager
def no_gradient_sync(model):
    """Within: the backward of ``model`` accumulates gradients locally, without communication.

    DDP and FSDP1: ``no_sync()``; FSDP2 (``fully_shard``): ``set_requires_gradient_sync(False)``, so
    gradients accumulate unsharded and are reduce-scattered once, on the last micro-batch. Any other
    model (or None): nothing to skip.
    """
    if hasattr(model, "no_sync"):  # DDP, FSDP1
        with model.no_sync():
            yield
    elif hasattr(model, "set_requires_gradient_sync"):  # FSDP2 (fully_shard): no reduce-scatter
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:  # the backward ran inside the block; the next micro-batch decides again
            model.set_requires_gradient_sync(True)
    else:
        yield


def clip_grad_norm(model, opts, max_norm: float) -> torch.Tensor:
    """Clip the gradients of ``opts`` to ``max_norm`` in total; the norm as a device tensor (no sync)."""
    if model is not None and hasattr(model, "clip_grad_norm_") and is_fsdp(model):
        return model.clip_grad_norm_(max_norm)  # FSDP1: norm across shards
    params = [p for opt in opts for g in opt.param_groups for p in g["params"] if p.grad is not None]
    # foreach norm on the device; returns a tensor, no host sync
    return torch.nn.utils.clip_grad_norm_(params, max_norm)
