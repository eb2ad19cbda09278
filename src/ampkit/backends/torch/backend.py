"""The PyTorch backend: :class:`ampkit.backends.base.Backend`'s operations, one mixin per command."""

from __future__ import annotations

from .audit import TorchAudit
from .bench import TorchBench
from .doctor import TorchDoctor
from .environment import TorchEnvironment
from .parity import TorchParity


class TorchBackend(TorchEnvironment, TorchDoctor, TorchBench, TorchParity, TorchAudit):
    name = "torch"
