"""What one step of ``ampkit.MixedPrecision`` returns (:class:`StepResult`), and the locator that is
there when ``locate_overflows()`` is off."""

from __future__ import annotations

import torch

__all__ = ["StepResult"]


class StepResult:
    """What one optimizer step did.

    Attributes:
        skipped: True when the optimizer step was skipped for inf/NaN gradients (fp16 only).
        scale: the loss scale after this step's update (1.0 without loss scaling).
        grad_norm: the unscaled total gradient norm when clipping was asked for, else None.
            Reading it incurs a host-device sync (it is computed on the device).
    """

    __slots__ = ("skipped", "scale", "_grad_norm", "overflow")

    def __init__(self, skipped: bool, scale: float, grad_norm: torch.Tensor | None, overflow: dict | None = None):
        self.skipped = skipped
        self.scale = scale
        self._grad_norm = grad_norm
        #: with ``locate_overflows()`` on and a skipped step: {"name", "phase"} of the first inf/NaN
        self.overflow = overflow

    @property
    def grad_norm(self) -> float | None:
        if self._grad_norm is None:
            return None
        return float(self._grad_norm)  # host-device sync, on purpose and only when read

    @property
    def grad_norm_tensor(self) -> torch.Tensor | None:
        """The norm as a device tensor (no sync)."""
        return self._grad_norm

    def __repr__(self) -> str:
        norm = "None" if self._grad_norm is None else "<tensor>"
        return f"StepResult(skipped={self.skipped}, scale={self.scale}, grad_norm={norm})"


class _NoLocator:
    """``locate_overflows()`` off: nothing recorded, nothing to locate."""

    def locate(self) -> None:
        return None

    def reset(self) -> None:
        pass

    def remove(self) -> None:
        pass


_NO_LOCATOR = _NoLocator()
