"""ampkit: mixed-precision training you can check, measure and trust."""

from __future__ import annotations

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
    "LossScaleWarning",
    "MixedPrecision",
    "StepResult",
    "Workload",
    "verify",
    "audit",
    "bench",
    "doctor",
    "parity",
]

_LAZY = {
    "__version__": ("ampkit._version", "__version__"),
    **{name: ("ampkit.precision", name) for name in ("MODES", "TRAINING_MODES", "Precision", "get_precision", "parse_mode")},
    **{name: ("ampkit.errors", name) for name in ("UsageError", "ModeUnavailableError", "AutocastDisabledError")},
    "LossScaleWarning": ("ampkit.health", "LossScaleWarning"),
    "MixedPrecision": ("ampkit.backends.torch.engine", "MixedPrecision"),
    "StepResult": ("ampkit.backends.torch.engine", "StepResult"),
    "Workload": ("ampkit.backends.torch.workloads", "Workload"),
    #: the precision contract on any PyTorch loop: verify(model, optimizer, compute_dtype=torch.bfloat16)
    "verify": ("ampkit.backends.torch.engine.contract", "verify_torch"),
}
#: command packages that are callable: ampkit.audit(...) runs the PyTorch entry point, ampkit.bench(...),
#: ampkit.parity(...) and ampkit.doctor(...) those of either framework; each shows its real signature
_CALLABLE_PACKAGES = ("audit", "bench", "doctor", "parity")


def __getattr__(name: str):
    import importlib

    if name in _CALLABLE_PACKAGES:
        return importlib.import_module(f"ampkit.{name}")  # importing sets the attribute on this package
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ampkit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
