"""PyTorch workloads: ``ampkit.Workload``, the built-in models and users' MODULE:FACTORY models."""

from __future__ import annotations

import torch

from .base import Workload, call_model, classification_batches, cross_entropy, logits_of, output_loss
from .builtin import BUILTIN, build_builtin, check_builtin, default_workload
from .loader import build_user_workload

__all__ = ["Workload", "BUILTIN", "build_workload", "build_builtin", "build_user_workload", "check_builtin",
           "default_workload", "call_model", "classification_batches", "cross_entropy", "logits_of", "output_loss"]


def build_workload(workload: str | None, model: str | None, input_shape, num_classes: int, device,
                   seed: int = 0) -> Workload:
    """A built-in workload or a user's factory, on ``device``. The seed is set before the model is
    built, so every mode (and every process) starts from the same initial weights."""
    torch.manual_seed(seed)
    wl = build_user_workload(model, input_shape, num_classes) if model else build_builtin(workload)
    wl.model.to(device)
    return wl
