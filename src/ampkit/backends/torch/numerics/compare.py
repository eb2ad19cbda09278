"""The relative-error rule (:func:`ampkit.compare.relative_error`) on PyTorch tensors."""

from __future__ import annotations

import torch

from ....compare import relative_error
from ....formats import FloatFormat


def tensor_relative_error(x: torch.Tensor | None, y: torch.Tensor | None, fmt: FloatFormat,
                          ref: torch.Tensor | None = None) -> float | None:
    """``||x - y|| / ||ref||`` (``ref``: ``y`` when not given) by the one rule, from float32 norms
    (two host-device syncs); None when a tensor is missing or the shapes differ (nothing to compare)."""
    if x is None or y is None or x.shape != y.shape:
        return None
    ref = y if ref is None else ref
    dist = float(torch.linalg.vector_norm(x.float() - y.float()))
    return relative_error(dist, float(torch.linalg.vector_norm(ref.float())), ref.numel(), fmt)
