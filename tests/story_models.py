"""Failing PyTorch models, one per kind of failure, for the one-story tests (tests/audit/test_one_story.py,
tests/integrations/test_callback_float32.py):
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


class Block(nn.Module):
    """A ResNet basic block: conv-bn-relu-conv-bn plus the identity."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(x + self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))))


def resnet() -> nn.Module:
    """A ResNet-18-like stem, two basic blocks and a linear head (16 channels)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), Block(16), Block(16),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))


def batch_resnet():
    g = torch.Generator().manual_seed(0)
    return torch.randn(16, 3, 16, 16, generator=g), torch.randint(0, 10, (16,), generator=g)


#: the loss factor of :func:`loss_resnet`: GradScaler backs off to 0.25 (the issue's ResNet-18 did at 3e4)
RESNET_LOSS_FACTOR = 1e6


def loss_resnet(out, y):
    """Cross-entropy times 1e6 (a loss summed instead of averaged, say): the gradients overflow fp16 at
    every scale >= 1, and a real GradScaler backs off below 1."""
    return F.cross_entropy(out.float(), y) * RESNET_LOSS_FACTOR


def gradscaler_start(model, batch, loss_fn, init_scale: float = 2.0**16, limit: int = 64) -> tuple[int, float]:
    """A real torch.amp.GradScaler run's start on one batch (fp16 autocast on the CPU, the weights
    unchanged by a skipped step): the steps it skips and the scale of its first taken step."""
    x, y = batch
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale)
    for skips in range(limit):
        scale = scaler.get_scale()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if scaler.get_scale() >= scale:
            return skips, scale
    raise AssertionError(f"GradScaler still skipping after {limit} steps")


class GPT2Logits(nn.Module):
    """transformers' GPT-2 from a config (random weights, nothing downloaded), its logits as the output."""

    def __init__(self, qk_gain: float = 300.0, layers: int = 2) -> None:
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=layers, n_head=2, resid_pdrop=0.0,
                         embd_pdrop=0.0, attn_pdrop=0.0)
        self.gpt = GPT2LMHeadModel(cfg)
        with torch.no_grad():  # c_attn's weight is (n_embd, 3 n_embd): the query and key columns first
            for block in self.gpt.transformer.h:
                block.attn.c_attn.weight[:, : 2 * cfg.n_embd] *= qk_gain

    def forward(self, ids):
        return self.gpt(input_ids=ids).logits


def gpt2() -> nn.Module:
    torch.manual_seed(0)
    return GPT2Logits()


def batch_gpt2():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 64, (4, 16), generator=g)
    return ids, ids


def loss_gpt2(logits, ids):
    return F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def poisson_workload():
    """A ``--model`` factory: :func:`poisson` with its batch and loss."""
    from ampkit import Workload

    data = batch_poisson()
    return Workload(poisson(), lambda *a: data, loss_fn=loss_poisson, name="poisson")
