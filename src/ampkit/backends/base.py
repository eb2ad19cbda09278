"""The interface every framework backend gives the commands.

:func:`ampkit.backends.get_backend` returns a :class:`Backend`; the CLI and the library's
command entry points call only these methods, with the framework-neutral configs of each command
(:class:`ampkit.bench.config.BenchConfig`, :class:`ampkit.parity.core.ParityConfig`,
:class:`ampkit.audit.core.AuditConfig`) and get the neutral reports back. A new framework is one
new folder beside ``torch/`` and ``tensorflow/`` whose package defines such a class.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable


@runtime_checkable
class Backend(Protocol):
    name: str

    def doctor(self, device: str, *, quick: bool = False, progress: Callable[[str], None] | None = None):
        """-> ampkit.doctor.report.DoctorReport"""

    def bench(self, config, *, progress: Callable[[dict], None] | None = None, on_row=None):
        """-> ampkit.bench.report.BenchReport (rows that finished, ``interrupted`` on Ctrl-C)"""

    def parity(self, config, *, progress=None):
        """-> ampkit.parity.core.ParityReport"""

    def audit(self, config):
        """-> ampkit.audit.core.AuditReport"""
