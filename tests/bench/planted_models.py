"""Planted models for bench's honesty checks (``--model planted_models:NAME``; importable from
tests/bench, which is the working folder of the CLI tests that use them).

Each one fails in fp16 in one deterministic way, on a CPU, in milliseconds per step:

- ``warmup_overflow``: the loss is 100 x the output mean, so at GradScaler's initial scale (65536)
  the float16 gradients overflow; the scaler halves the scale a few times and then every step is
  clean. With enough warm-up steps every skip falls in the warm-up.
- ``always_overflow``: the loss is 1e8 x the output mean: the gradients overflow at every scale the
  scaler reaches in a few steps, so every step is skipped.
- ``diverges``: the output is 1000.1; float16's spacing at 1000 is 0.5, so fp16 computes 1000 and
  its loss (the squared distance to 1000.35) is 0.1225 where fp32's is 0.0625: finite, no skipped
  step, and nearly twice fp32's.

The learning rates are tiny, so fp32's own loss barely moves: any gap is the mode's.
"""

from __future__ import annotations

import torch
import torch.nn as nn

import ampkit


def _noise(n_in: int):
    def make_batch(n, device, gen):
        return torch.randn((n, n_in), generator=gen).to(device), None
    return make_batch


def warmup_overflow():
    return ampkit.Workload(nn.Linear(8, 8), _noise(8), loss_fn=lambda out, _: 100.0 * out.float().mean(),
                           name="warmup_overflow", batch_size=4, lr=1e-6)


def always_overflow():
    return ampkit.Workload(nn.Linear(8, 8), _noise(8), loss_fn=lambda out, _: 1e8 * out.float().mean(),
                           name="always_overflow", batch_size=4, lr=1e-6)


class Offset(nn.Module):
    """x @ w + b with every x = 1, w = 0.1/16 and b = 1000: the output is 1000.1 in float32."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 1)
        with torch.no_grad():
            self.lin.weight.fill_(0.1 / 16)
            self.lin.bias.fill_(1000.0)

    def forward(self, x):
        return self.lin(x)


def diverges():
    def make_batch(n, device, gen):
        return torch.ones(n, 16, device=device), None
    return ampkit.Workload(Offset(), make_batch, loss_fn=lambda out, _: ((out.float() - 1000.35) ** 2).mean(),
                           name="diverges", batch_size=4, lr=1e-6)
