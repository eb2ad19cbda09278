"""Workloads: built-in models (CPU-sized and the zoo) and users' MODULE:FACTORY models."""

from __future__ import annotations

from .base import Workload

__all__ = ["Workload"]
