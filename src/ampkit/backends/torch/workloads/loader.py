"""A user's ``MODULE:FACTORY`` for PyTorch: what it returns, turned into a Workload."""

from __future__ import annotations

import torch.nn as nn

from ....errors import UsageError
from ....factory import call_factory
from .base import Workload, classification_batches


def build_user_workload(spec: str, input_shape: tuple[int, ...] | None, num_classes: int | None = None) -> Workload:
    obj = call_factory(spec)
    model = obj.model if isinstance(obj, Workload) else obj
    if isinstance(model, nn.Module) and any(t.is_meta for t in (*model.parameters(), *model.buffers())):
        raise UsageError(f"{spec}() returned a model with tensors on the meta device (shapes, no data); "
                         "materialize it in the factory: model.to_empty(device='cpu'), then initialize its weights")
    if isinstance(obj, Workload):
        if obj.name == "custom":
            obj.name = spec
        return obj
    if isinstance(obj, nn.Module):
        if input_shape is None:
            raise UsageError(f"{spec} returned a bare model: give --input-shape (per sample, without the "
                             "batch dimension, e.g. 3,32,32) and optionally --num-classes")
        return Workload(obj, classification_batches(input_shape, num_classes or 10), name=spec)
    raise UsageError(f"{spec}() returned a {type(obj).__name__}; expected an ampkit.Workload or a torch.nn.Module")
