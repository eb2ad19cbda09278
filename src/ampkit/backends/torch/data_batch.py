"""``--data MODULE:FACTORY`` as a workload's batches: bench times, and the audit audits, a real batch
of the user's data instead of random inputs."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn

from ...errors import UsageError
from .audit_batch import first_batch, user_data
from .parity_data import to_device
from .workloads import Workload, cross_entropy, logits_of
from .workloads.inputs import input_description


def _fit(obj: Any, n: int) -> Any:
    """Every tensor of a batch cut (or repeated in order) to ``n`` rows."""
    if isinstance(obj, torch.Tensor) and obj.dim() >= 1 and len(obj):
        if len(obj) < n:
            obj = obj.repeat(math.ceil(n / len(obj)), *([1] * (obj.dim() - 1)))
        return obj[:n]
    if isinstance(obj, dict):
        return {k: _fit(v, n) for k, v in obj.items()}
    if isinstance(obj, (tuple, list)):
        return type(obj)(_fit(v, n) for v in obj)
    return obj


class DataBatches:
    """``make_batch(n, device, generator)`` over the user's data: its first ``n`` samples, in order
    (the same batch in every mode and step: bench times a step, not an epoch)."""

    def __init__(self, spec: str, batch_size: int = 32):
        self.spec = spec
        self.feed = user_data(spec)  # the audit's reading of --data: one data set, or parity's train part
        self.first, _ = first_batch(self.feed, spec, batch_size, torch.device("cpu"))
        self.batch_size = len(self.first[1]) if isinstance(self.first[1], torch.Tensor) and self.first[1].dim() else batch_size
        self._cache: dict[int, tuple] = {}

    def __call__(self, n: int, device, generator=None) -> tuple:
        if n not in self._cache:
            batch = self.first
            if len(self.first[1]) < n and self.feed.size() not in (None, len(self.first[1])):
                batch = next(iter(self.feed.batches(0, 0, torch.device("cpu"), shuffle=False, batch_size=n)))
            self._cache[n] = _fit(batch, n)
        return to_device(self._cache[n], device)

    def classes(self) -> bool:
        y = self.first[1]
        return isinstance(y, torch.Tensor) and not y.is_floating_point() and not y.is_complex()

    def describe(self) -> dict:
        """What the document says was fed: the data's first batch (kind "data", its shape and dtype)."""
        inputs, targets = self.first
        doc = input_description(inputs, "data", **{"from": self.spec})
        if isinstance(targets, torch.Tensor):
            doc["targets"] = {"dtype": str(targets.dtype).removeprefix("torch."), "shape": list(targets.shape)}
        return doc


def _mse(out, y):
    return torch.nn.functional.mse_loss(logits_of(out).float(), y.float())


def data_workload(model_obj, spec: str, data: DataBatches) -> Workload:
    """The user's model (a bare module, or a Workload keeping its own loss) fed ``data``'s batches."""
    if isinstance(model_obj, Workload):
        model_obj.make_batch, model_obj.input = data, data.describe()
        model_obj.batch_size = data.batch_size
        return model_obj
    if not isinstance(model_obj, nn.Module):
        raise UsageError(f"{spec}() returned a {type(model_obj).__name__}; expected an ampkit.Workload or a torch.nn.Module")
    loss = cross_entropy if data.classes() else _mse
    return Workload(model_obj, data, loss_fn=loss, name=spec, batch_size=data.batch_size, input=data.describe())
