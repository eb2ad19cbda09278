"""Tiny planted models for the precision-plan tests (factories usable as ``--model MODULE:FACTORY``)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class ScoresAttention(nn.Module):
    """Attention whose scores ``q @ k^T`` overflow float16 inside its own forward (it has no leaf
    after the scores: the first non-finite output is this module's own)."""

    def __init__(self, d: int = 16, gain: float = 400.0) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.gain = gain

    def forward(self, x):
        q, k = self.q(x) * self.gain, self.k(x) * self.gain
        scores = q @ k.transpose(-1, -2)          # |scores| ~ 1e5..1e6: beyond float16's 65504
        scores = scores - scores.amax(-1, keepdim=True)
        return torch.softmax(scores, -1) @ self.v(x)


class AttentionNet(nn.Module):
    def __init__(self, d_in: int = 8, d: int = 16, classes: int = 4) -> None:
        super().__init__()
        self.embed = nn.Linear(d_in, d)
        self.attn = ScoresAttention(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):                          # x: (batch, tokens, d_in)
        return self.head(self.attn(torch.tanh(self.embed(x))).mean(1))


class Cancel(nn.Module):
    """A leaf whose output is the difference of two nearly equal products: bf16's rounding of each
    product (2**-9 relative) is most of the difference (catastrophic cancellation)."""

    def __init__(self, d_in: int = 16, d: int = 16) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(1)
        w = torch.randn(d, d_in, generator=g)
        self.w1 = nn.Parameter(w.clone())
        self.w2 = nn.Parameter(w + 1e-3 * torch.randn(d, d_in, generator=g))

    def forward(self, x):
        return (F.linear(x, self.w1) - F.linear(x, self.w2)) * 1e3


class CancelNet(nn.Module):
    def __init__(self, d_in: int = 16, classes: int = 4) -> None:
        super().__init__()
        self.cancel = Cancel(d_in, 16)
        self.body = nn.Linear(16, 32)
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        return self.head(torch.relu(self.body(self.cancel(x))))


class OutlierNet(nn.Module):
    """Five Linear layers of fp8 shape; ``mid`` sees inputs with one outlier channel (1e4 times the
    rest), which one tensorwise fp8 scale flushes."""

    def __init__(self, d: int = 32, classes: int = 16) -> None:
        super().__init__()
        self.first = nn.Linear(d, d)
        self.mid = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)
        self.a = nn.Linear(d, d)
        self.b = nn.Linear(d, d)
        self.last = nn.Linear(d, classes)
        mask = torch.ones(d)
        mask[3] = 1e4
        self.register_buffer("mask", mask)

    def forward(self, x):
        h = torch.relu(self.first(x)) * self.mask
        h = torch.tanh(self.a(self.norm(self.mid(h))))
        return self.last(torch.tanh(self.b(h)))


class MLP(nn.Module):
    def __init__(self, d_in: int = 16, classes: int = 4) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, 32), nn.ReLU(), nn.Linear(32, classes))

    def forward(self, x):
        return self.net(x)


def attention_net():
    torch.manual_seed(0)
    return AttentionNet()


def attention_data():
    g = torch.Generator().manual_seed(0)
    return torch.randn(64, 6, 8, generator=g), torch.randint(0, 4, (64,), generator=g)


def cancel_net():
    torch.manual_seed(0)
    return CancelNet()


def outlier_net():
    torch.manual_seed(0)
    return OutlierNet()


def mlp():
    torch.manual_seed(0)
    return MLP()


def attention_parity_data():
    """(train, validation) for ``ampkit parity/plan --data``: (inputs, targets) tensors."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(160, 6, 8, generator=g)
    y = (x[:, :, 0].sum(1) > 0).long() + 2 * (x[:, :, 1].sum(1) > 0).long()
    return (x[:128], y[:128]), (x[128:], y[128:])


def mlp_parity_data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(160, 16, generator=g)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    return (x[:128], y[:128]), (x[128:], y[128:])
