"""``ampkit.Workload``: a model, a way to make a batch, and a loss."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F


def call_model(model: nn.Module, inputs: Any):
    """Call with a tensor, a tuple of positional inputs, or a dict of keyword inputs."""
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def logits_of(output: Any) -> torch.Tensor:
    """Model outputs as a tensor: plain tensors, HF ModelOutput (.logits), or tuples (first item)."""
    if isinstance(output, torch.Tensor):
        return output
    if hasattr(output, "logits"):
        return output.logits
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    raise TypeError(f"cannot take logits from a model output of type {type(output).__name__}")


def cross_entropy(output: Any, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over the last dimension (token-level for sequence models; -100 ignored)."""
    logits = logits_of(output)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), ignore_index=-100)


def output_loss(output: Any, targets: Any = None) -> torch.Tensor:
    """For models that compute their own loss (HF models given labels): ``output.loss``."""
    return output.loss


@dataclass
class Workload:
    """What ``--model MODULE:FACTORY`` may return, and what the built-in workloads are.

    Args:
        model: the model (float32 parameters; the engine does the mixed precision).
        make_batch: ``make_batch(batch_size, device, generator) -> (inputs, targets)``; inputs a
            tensor, a tuple (positional) or a dict (keyword arguments). Must be deterministic
            for a given generator.
        loss_fn: ``loss_fn(model_output, targets) -> scalar``; default: cross-entropy.
        flops_per_sample: training FLOPs (forward + backward) per sample, for TFLOP/s and MFU;
            None lets ampkit count them once with torch's FLOP counter.
        name: shown in reports.
        batch_size: default batch size for this workload.
        lr: learning rate of the AdamW optimizer that bench uses.
        metric_fn: ``metric_fn(logits, targets) -> scalar``, higher is better, for ``ampkit parity``
            (None: accuracy for class targets, else the validation loss).
        input: what ``make_batch`` feeds, said for documents (None: described from its batches).
    """

    model: nn.Module
    make_batch: Callable[[int, torch.device, torch.Generator], tuple]
    loss_fn: Callable[[Any, Any], torch.Tensor] = cross_entropy
    flops_per_sample: float | None = None
    name: str = "custom"
    batch_size: int = 32
    lr: float = 1e-4
    metric_fn: Callable[[Any, Any], Any] | None = None
    #: what ``make_batch`` feeds, for documents (``{"kind": "token_ids", "range": [0, vocab]}``,
    #: ``{"kind": "normal(0,1)"}``); None: the workload's own batches, described as they come
    input: dict | None = None

    def loss(self, batch: tuple) -> torch.Tensor:
        inputs, targets = batch
        return self.loss_fn(call_model(self.model, inputs), targets)


def classification_batches(input_shape: tuple[int, ...], num_classes: int):
    """A make_batch for a classifier: standard-normal inputs, integer class targets."""
    shape = tuple(int(d) for d in input_shape)

    def make_batch(batch_size: int, device: torch.device, generator: torch.Generator):
        x = torch.randn((batch_size, *shape), generator=generator)
        y = torch.randint(0, num_classes, (batch_size,), generator=generator)
        return x.to(device), y.to(device)

    return make_batch
