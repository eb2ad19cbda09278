"""Four failing PyTorch models, one per kind of failure, for the one-story test (tests/audit/test_one_story.py, tests/integrations/test_callback_float32.py):
each factory seeds its weights, ``batch_*`` is the batch every command audits, ``loss_*`` its loss.

- :func:`attention`: raw inputs of ~500 into an attention whose own ``q @ k^T`` overflows float16
  (a forward overflow inside a module);
- :func:`wide`: inputs of ~300 at batch 256 into one Linear: its weight gradient, a sum over the
  batch, overflows fp16 at GradScaler's 65536 while every activation is finite (a parameter-gradient
  overflow);
- :func:`poisson`: a Poisson-rate head whose own ``exp`` overflows float32 (fp32 failing too);
- :func:`tiny`: a loss times 1e-8 (gradients that flush at scale 1 and are lost in part at 2**16).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, -1)
        scores = q @ k.transpose(-1, -2)          # raw inputs of ~500: scores beyond float16's 65504
        scores = scores - scores.amax(-1, keepdim=True)
        return self.o(torch.softmax(scores, -1) @ v)


class AttentionNet(nn.Module):
    def __init__(self, d: int = 16, classes: int = 4) -> None:
        super().__init__()
        self.attn = Attention(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):                          # x: (batch, tokens, d), raw values of ~500
        return self.head(torch.tanh(self.attn(x).mean(1)))


def attention() -> nn.Module:
    torch.manual_seed(0)
    return AttentionNet()


def batch_attention():
    g = torch.Generator().manual_seed(0)
    return torch.randn(8, 6, 16, generator=g) * 500, torch.randint(0, 4, (8,), generator=g)


def wide() -> nn.Module:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 10))
    with torch.no_grad():
        m[0].weight.mul_(0.01)
    return m


def batch_wide():
    g = torch.Generator().manual_seed(0)
    return torch.randn(256, 16, generator=g) * 300, torch.randint(0, 10, (256,), generator=g)


class Poisson(nn.Module):
    """Counts regression: rate = exp(logits); the logits reach ~150, so exp overflows float32 in the
    root module's own forward."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
        with torch.no_grad():
            self.body[2].weight.mul_(150.0)

    def forward(self, x):
        return torch.exp(self.body(x)).squeeze(-1)


def poisson() -> nn.Module:
    torch.manual_seed(0)
    return Poisson()


def batch_poisson():
    g = torch.Generator().manual_seed(0)
    return torch.randn(32, 16, generator=g) * 3, torch.poisson(torch.full((32,), 3.0), generator=g)


def loss_poisson(rate, y):
    return F.poisson_nll_loss(rate.float(), y, log_input=False)


def tiny() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def batch_tiny():
    g = torch.Generator().manual_seed(0)
    return torch.randn(32, 16, generator=g), torch.randint(0, 4, (32,), generator=g)


def loss_tiny(out, y):
    return F.cross_entropy(out.float(), y) * 1e-8
