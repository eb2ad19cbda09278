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
