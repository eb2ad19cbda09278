"""The PyTorch backend: the engine (``ampkit.MixedPrecision``) and doctor, bench, parity and audit.

Everything that imports torch lives in this folder; the commands reach it through
:class:`TorchBackend`, which :func:`ampkit.backends.get_backend` returns.
"""

from __future__ import annotations


class TorchBackend:
    name = "torch"

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
