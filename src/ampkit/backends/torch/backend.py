"""The PyTorch backend: :class:`ampkit.backends.base.Backend`'s operations, one mixin per command."""

from __future__ import annotations

from ..base import Backend
from .bench import TorchBench
from .doctor import TorchDoctor
from .environment import TorchEnvironment
from .parity import TorchParity
from .whatif import TorchWhatIfAudit


class TorchBackend(TorchEnvironment, TorchDoctor, TorchBench, TorchParity, TorchWhatIfAudit, Backend):
    name = "torch"
