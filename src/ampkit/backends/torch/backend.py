"""The PyTorch backend: :class:`ampkit.backends.base.Backend`'s operations, one mixin per command."""

from __future__ import annotations

from .audit import TorchAudit
from .bench import TorchBench
from .doctor import TorchDoctor
from .environment import TorchEnvironment
from .parity import TorchParity


class TorchBackend(TorchEnvironment, TorchDoctor, TorchBench, TorchParity, TorchAudit):
    name = "torch"

    # ---- whole commands, until each command's neutral driver replaces them (issue #21)
    def doctor(self, device, *, quick: bool = False, progress=None):
        from . import doctor
        from .devices import resolve_device

        return doctor.run(resolve_device(device), quick=quick, progress=progress)

    def bench(self, config, *, progress=None, on_row=None):
        from .bench import run_bench

        return run_bench(config, progress=progress, on_row=on_row)

    def parity(self, config, *, progress=None):
        from .parity import run_parity

        return run_parity(config, progress=progress)

    def audit(self, config):
        from .audit import audit_from_config

        return audit_from_config(config)
