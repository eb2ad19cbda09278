"""Models for ``bench --compile`` (``--model compile_models:NAME --input-shape 8``; importable from
tests/bench, the working folder of the CLI tests).

- ``tiny``: Linear-ReLU-Linear, nothing dynamo cannot trace: no graph break.
- ``breaks``: the same with a ``.item()`` in forward (a Python float from a tensor): dynamo breaks the
  graph there (``capture_scalar_outputs`` is off by default).
- ``refuses``: a forward that raises while dynamo traces it (eagerly it runs): dynamo gives up on the
  whole frame and runs it eagerly, counting no ``graph_break``.
"""

from __future__ import annotations

import torch
import torch.nn as nn


class _Tiny(nn.Module):
    def __init__(self, item: bool = False):
        super().__init__()
        self.a, self.b, self.item = nn.Linear(8, 16), nn.Linear(16, 4), item

    def forward(self, x):
        h = torch.relu(self.a(x))
        if self.item:
            h = h / (1.0 + h.abs().max().item())  # the deliberate graph break
        return self.b(h)


def tiny() -> nn.Module:
    torch.manual_seed(0)
    return _Tiny()


def breaks() -> nn.Module:
    torch.manual_seed(0)
    return _Tiny(item=True)


class _Refuses(_Tiny):
    def forward(self, x):
        if torch.compiler.is_compiling():
            raise RuntimeError("not while compiling")
        return super().forward(x)


def refuses() -> nn.Module:
    torch.manual_seed(0)
    return _Refuses()
