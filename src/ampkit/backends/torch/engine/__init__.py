"""The PyTorch training engine, ``ampkit.MixedPrecision``, one module per concept."""

from .mixed_precision import MixedPrecision, StepResult

__all__ = ["MixedPrecision", "StepResult"]
