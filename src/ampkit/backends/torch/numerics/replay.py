"""Replaying one audited step: the same random numbers for every pass, buffers put back between them."""

from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def same_randomness(device, seed: int):
    """Every pass of a step draws the same random numbers (dropout masks, anything a model draws):
    the global generators are seeded alike inside a fork, so the user's random stream is untouched."""
    with torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        yield


def restore(saved) -> None:
    """Copy each saved value back into its tensor: ``saved`` is ``[(tensor, value), ...]``."""
    with torch.no_grad():
        for t, value in saved:
            t.copy_(value)


def snapshot(model, *, parameters: bool = False) -> list:
    """Copies of the model's buffers (and its parameters, with ``parameters``), for :func:`restore`:
    ``[(tensor, copy), ...]``. A pass that updates running statistics is put back with them."""
    tensors = [*model.parameters(), *model.buffers()] if parameters else list(model.buffers())
    return [(t, t.detach().clone()) for t in tensors]


class ModelState:
    """The caller's model as it came, given back by :meth:`restore`: its parameters, buffers, ``.grad``
    and train/eval mode (an audit trains the model it was given, on copies' worth of memory)."""

    def __init__(self, model) -> None:
        self.model, self.training = model, model.training
        self.saved = snapshot(model, parameters=True)
        self.grads = [(p, p.grad) for p in model.parameters()]

    def restore(self) -> None:
        self.model.train(self.training)
        restore(self.saved)
        for p, g in self.grads:
            p.grad = g
