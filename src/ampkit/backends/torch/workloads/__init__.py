"""PyTorch workloads: ``ampkit.Workload``, the built-in models and users' MODULE:FACTORY models."""

from __future__ import annotations

import torch

from .base import Workload, call_model, classification_batches, cross_entropy, logits_of, output_loss
from .builtin import BUILTIN, build_builtin, check_builtin, default_workload
from .loader import build_user_workload

__all__ = ["Workload", "BUILTIN", "build_workload", "build_builtin", "build_user_workload", "check_builtin",
           "default_workload", "call_model", "classification_batches", "cross_entropy", "logits_of", "output_loss"]


def build_workload(workload: str | None, model: str | None, input_shape, num_classes: int, device,
                   seed: int = 0, *, seq_len: int | None = None, image_size: int | None = None, fed=None) -> Workload:
    """A built-in workload or a user's factory, on ``device``. The seed is set before the model is
    built, so every mode (and every process) starts from the same initial weights. ``seq_len`` and
    ``image_size`` resize a built-in workload that takes them; ``fed``: a user's model fed the user's
    data (:func:`build_user_workload`)."""
    torch.manual_seed(seed)
    if model:
        from ....workload_sizes import size_kwargs

        size_kwargs("torch", None, model, seq_len, image_size)  # a size flag with --model: UsageError
        wl = build_user_workload(model, input_shape, num_classes, fed)
    else:
        wl = build_builtin(workload, seq_len=seq_len, image_size=image_size)
    wl.model.to(device)
    return wl
