"""What audit's driver (:mod:`ampkit.audit.driver`) asks of a framework backend: small typed operations.

Part of :class:`ampkit.backends.base.Backend`; the flow around them is the driver's, written once.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class AuditOps(Protocol):
    """(being written: see issue #21)"""
