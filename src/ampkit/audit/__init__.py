"""``ampkit audit``: per-layer numerics of a mixed-precision step against an fp32 reference.

This package holds what both frameworks share (statistics, findings, the report); the measuring
lives in each backend. The module itself is callable, so ``ampkit.audit(model, batch)`` is the
PyTorch audit (see :func:`ampkit.backends.torch.audit.audit`) whether or not this package has
been imported.
"""

from __future__ import annotations

from .._callable import make_callable
from .core import AuditConfig, AuditReport, Finding, LayerStats

__all__ = ["AuditConfig", "AuditReport", "Finding", "LayerStats", "audit"]


def audit(*args, **kwargs):
    """``ampkit.audit(model_or_workload, batch=None, loss_fn=..., mode="fp16", ...)`` for PyTorch."""
    from ..backends.torch.audit import audit as _audit

    return _audit(*args, **kwargs)


make_callable(__name__, audit)
