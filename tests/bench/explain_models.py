"""Tiny models for bench --explain's tests (factories for --model)."""

from __future__ import annotations

import torch.nn as nn


def small():
    """Layers of 64x64: matmuls far too small for a low-precision gain."""
    return nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 10))


def large():
    """Layers of 1000x1000: matmuls large enough to gain where the CPU has native bf16."""
    return nn.Sequential(nn.Linear(1000, 1000), nn.GELU(), nn.Linear(1000, 1000), nn.GELU(), nn.Linear(1000, 10))
