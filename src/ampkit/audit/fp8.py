"""The findings of an fp8 audit (``ampkit audit --mode fp8``), framework-neutral.

A backend's fp8 session fills each Linear layer's ``fp8`` entry (:class:`~ampkit.audit.report.LayerStats`):
whether it was converted and why, its output and weight-gradient errors against bf16 and fp32, the
saturated and flushed shares of its fp8 casts, and ``advice`` worded for the framework. Each layer
with advice is one ``precision`` finding here.
"""

from __future__ import annotations

from .report import SEVERITY, Finding, LayerStats

__all__ = ["fp8_findings"]


def fp8_findings(layers: list[LayerStats]) -> list[Finding]:
    """One ``precision`` finding per converted layer that has advice, in layer order."""
    out = []
    for lay in layers:
        entry = lay.fp8 or {}
        if entry.get("converted") and entry.get("advice"):
            out.append(Finding(lay.name, "precision", f"fp8: {entry['advice']}", SEVERITY["precision"]))
    return out
