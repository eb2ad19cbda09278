"""What bench's driver (:mod:`ampkit.bench.driver`) asks of a framework backend: small typed operations.

Part of :class:`ampkit.backends.base.Backend`; the flow around them is the driver's, written once.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class BenchOps(Protocol):
    """(being written: see issue #21)"""
