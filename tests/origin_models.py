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


class Gated(nn.Module):
    """A block whose own code multiplies its projection by itself (a gated product, as GLU feed-forwards do):
    ``up`` is the identity, so on inputs of amax A its own ``h * h`` reaches A**2 while ``up``'s output is A.
    Its output is ``down``'s, so a module-output watch names ``down`` (the recipient)."""

    def __init__(self, d=8):
        super().__init__()
        self.up, self.down = nn.Linear(d, d), nn.Linear(d, d)
        with torch.no_grad():
            self.up.weight.copy_(torch.eye(d))
            self.up.bias.zero_()

    def forward(self, x):
        h = self.up(x)
        return self.down(h * h)


class GatedNet(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        torch.manual_seed(0)
        self.block, self.head = Gated(d), nn.Linear(d, 2)

    def forward(self, x):
        return self.head(self.block(x))


def gated_data(steps: int, planted, amax: float, *, batch: int = 8, seed: int = 0):
    """``steps`` batches of ``batch`` samples (amax 3), the 1-based steps in ``planted`` scaled to amax ``amax``."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(steps * batch, 8, generator=g).clamp(-3, 3)
    x[::batch, 0] = 3.0
    for s in planted:
        x[(s - 1) * batch:s * batch] *= amax / 3
    return x, torch.randint(0, 2, (steps * batch,), generator=g)


T5_WO = "encoder.block.1.layer.1.DenseReluDense.wo"


def t5(wo_scale: float | None = None):
    """A tiny HF T5 from a config (random weights): 2+2 layers, d_model 32; ``wo_scale`` multiplies the weights
    of one feed-forward output (:data:`T5_WO`, whose outputs reach about 2.4 unscaled)."""
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    cfg = T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
                   relative_attention_num_buckets=8, relative_attention_max_distance=16, dropout_rate=0.0,
                   decoder_start_token_id=0, pad_token_id=0)
    model = T5ForConditionalGeneration(cfg)
    if wo_scale:
        with torch.no_grad():   # in two halves: a factor beyond float32's range would make the weights inf
            model.get_submodule(T5_WO).weight.mul_(wo_scale**0.5).mul_(wo_scale**0.5)
    return model


def t5_ids(n: int = 4, seq: int = 12, seed: int = 0):
    return torch.randint(1, 64, (n, seq), generator=torch.Generator().manual_seed(seed))
