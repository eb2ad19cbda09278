"""Planted PyTorch models for ``ampkit audit --what-if`` (tests/audit/test_whatif.py): each factory
seeds its weights, so the what-if run and the real audit see the same model; ``BATCH`` is the batch
both audit."""

from __future__ import annotations

import torch
import torch.nn as nn

from ampkit import Workload


class Scale(nn.Module):
    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor


class ChannelOutlier(nn.Module):
    """Multiplies one channel (the last dimension's ``channel``) by ``factor``: an outlier feature."""

    def __init__(self, channel: int, factor: float):
        super().__init__()
        self.channel, self.factor = channel, factor

    def forward(self, x):
        gain = torch.ones(x.shape[-1], device=x.device)
        gain[self.channel] = self.factor
        return x * gain


def batch(n: int = 32, d: int = 16, classes: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g), torch.randint(0, classes, (n,), generator=g)


def overflow() -> nn.Module:
    """Module "2" multiplies by 1e5: its output passes 65504."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), Scale(1e5), nn.Linear(32, 4))


def clean() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def outlier() -> nn.Module:
    """Channel 3 of the input of Linear "3" is 10**4 times the others."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), ChannelOutlier(3, 1e4), nn.Linear(64, 4))


def tiny_loss(out, y):
    """Cross-entropy times 1e-8: gradients of 1e-10 and below, lost in fp16 at 2**16, kept from about 2**21."""
    return nn.functional.cross_entropy(out.float(), y) * 1e-8


def underflow_workload() -> Workload:
    """A --model factory: the clean model with the tiny loss."""
    data = batch()
    return Workload(clean(), lambda *a: data, loss_fn=tiny_loss, name="underflow")
