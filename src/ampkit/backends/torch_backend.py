"""The PyTorch backend: the commands' entry points for torch."""

from __future__ import annotations


class TorchBackend:
    name = "torch"

    def doctor(self, device, *, quick: bool = False, progress=None):
        from ..devices import resolve_device
        from ..doctor import torch_checks

        return torch_checks.run(resolve_device(device), quick=quick, progress=progress)

    def bench(self, config, *, progress=None, on_row=None):
        from ..bench.runner import run_bench

        return run_bench(config, progress=progress, on_row=on_row)

    def parity(self, config, *, progress=None):
        from ..convergence.core import run_parity

        return run_parity(config, progress=progress)

    def audit(self, config):
        from ..numerics.core import audit_from_config

        return audit_from_config(config)
