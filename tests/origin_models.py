"""A model whose attention module computes its scores in its own forward (issue #34)."""

from __future__ import annotations

import torch
import torch.nn as nn


class Attn(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.q, self.k, self.v, self.o = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        scores = q @ k.transpose(-2, -1)          # unscaled: each token's score with itself is d * amax**2 / d
        return self.o(scores.softmax(-1) @ v)


class AttnNet(nn.Module):
    """q/k projections of (amax / 3) * I: on inputs of +-3 (:func:`batch`) q and k are +-``amax`` and each
    token's score with itself is 16 * amax**2 (255: 1.04e6 > fp16's 65504; q, k and every module
    output finite in fp16)."""

    def __init__(self, amax: float = 255.0, d: int = 16):
        super().__init__()
        torch.manual_seed(0)
        self.attn, self.head = Attn(d), nn.Linear(d, 4)
        with torch.no_grad():
            for lin in (self.attn.q, self.attn.k):
                lin.weight.copy_(torch.eye(d) * amax / 3)
                lin.bias.zero_()

    def forward(self, x):
        return self.head(self.attn(x).mean(1))


def attn_net() -> AttnNet:
    return AttnNet()


def batch(n: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 5, 16, generator=g).sign() * 3, torch.randint(0, 4, (n,), generator=g)


class Blow(nn.Module):
    """exp of its Linear's outputs, which are ~116 (bias 116, weight 0): inf in float32 too (exp(88.8) overflows)."""

    def __init__(self, d=16):
        super().__init__()
        self.fc = nn.Linear(d, d)
        with torch.no_grad():
            self.fc.weight.zero_()
            self.fc.bias.fill_(116.0)

    def forward(self, x):
        return torch.exp(self.fc(x))


def exp_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 16), Blow(), nn.Linear(16, 4))


def ln_net() -> nn.Module:
    """A Linear whose weights grew to 1e37 (outputs ~1e37: finite in float32 and bfloat16), a ReLU, then a
    LayerNorm, whose variance of them is inf in float32 too."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 16), nn.ReLU(), nn.LayerNorm(16), nn.Linear(16, 4))
    with torch.no_grad():
        m[1].weight.mul_(1e37)
    return m
