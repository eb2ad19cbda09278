"""ampkit: mixed-precision training you can check, measure and trust.

``import ampkit`` stays cheap: torch and the command modules load on first use.
"""

from __future__ import annotations

from ._version import __version__
from .errors import AutocastDisabledError, ModeUnavailableError, UsageError
from .precision import MODES, TRAINING_MODES, Precision, get_precision, parse_mode

__all__ = [
    "__version__",
    "MODES",
    "TRAINING_MODES",
    "Precision",
    "get_precision",
    "parse_mode",
    "UsageError",
    "ModeUnavailableError",
    "AutocastDisabledError",
    "MixedPrecision",
    "StepResult",
    "Workload",
    "audit",
    "parity",
]

_LAZY = {
    "MixedPrecision": ("ampkit.engine", "MixedPrecision"),
    "StepResult": ("ampkit.engine", "StepResult"),
    "Workload": ("ampkit.workloads.base", "Workload"),
    "audit": ("ampkit.numerics.core", "audit"),
    "parity": ("ampkit.convergence.core", "parity"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ampkit' has no attribute {name!r}")
