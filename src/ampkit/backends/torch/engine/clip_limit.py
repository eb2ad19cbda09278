"""``mp.step(..., max_grad_norm=X)``: the clip limit, validated without a host-device sync per step.

* A Python number (or a 0-d NumPy number): > 0, else one UsageError (a NaN limit made every weight
  NaN, a negative one turned the gradients round, 0 stopped training: issue #40). ``float("inf")``
  is a limit, as in :func:`torch.nn.utils.clip_grad_norm_`: the norm is computed and returned in
  ``StepResult.grad_norm``, nothing is clipped -- the common way to *measure* the norm (issue #49;
  PyTorch's ``test_grad_scaling_autocast_fused_optimizers`` with ``separate_unscale``).
* A tensor: its dtype and size are checked eagerly (one floating element, else a UsageError); a
  CPU tensor's value is read and checked like a number (no device is involved). A tensor on an
  accelerator is never read in ``step()`` -- that would be a sync every step. Instead the clip gets
  ``torch.where(not NaN and > 0, X, inf)``: a NaN or <= 0 limit clips nothing (the gradients stay
  as they are, never NaN or reversed), and the step is counted on the device;
  :meth:`MixedPrecision.health` reads that count (its one sync) and warns with the number of steps."""

from __future__ import annotations

import math
import numbers

import torch

from ....errors import UsageError

__all__ = ["ClipLimits"]

NAME = "max_grad_norm"


def positive(value) -> float:
    """A number limit: > 0 (``inf`` included: measure, clip nothing), else one UsageError naming it."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isnan(value) and value > 0:
        return value
    raise UsageError(f"{NAME} must be a number > 0 (float('inf') measures the norm without clipping); "
                     f"received {value!r}")


def on_host(t: torch.Tensor) -> bool:
    """Whether reading ``t`` costs no host-device sync (a CPU tensor)."""
    return t.device.type == "cpu"


class ClipLimits:
    """The limits one engine was given: each step's as the clip takes it, and the device count of
    the steps whose tensor limit was NaN or <= 0."""

    def __init__(self) -> None:
        self.invalid: torch.Tensor | None = None  # int64 on the limit's device; None until a device tensor came

    def limit(self, value):
        """``value`` as :func:`torch.nn.utils.clip_grad_norm_` takes it, or one UsageError."""
        if not isinstance(value, torch.Tensor):
            return positive(value)
        if not (value.is_floating_point() and value.numel() == 1):
            raise UsageError(f"{NAME} as a tensor must hold one floating-point number; received a "
                             f"{value.dtype} tensor of shape {tuple(value.shape)}")
        if on_host(value):  # read on the host: no device to wait for
            positive(float(value))
            return value
        limit = value.detach().reshape(())
        ok = limit > 0  # False for NaN; +inf passes (clips nothing, as the number does)
        bad = (~ok).to(torch.int64)
        self.invalid = bad if self.invalid is None else self.invalid.to(bad.device) + bad
        return torch.where(ok, limit, torch.full_like(limit, float("inf")))

    def messages(self) -> list[str]:
        """The health message for the steps whose limit clipped nothing (reads the count: a sync)."""
        n = int(self.invalid) if self.invalid is not None else 0
        if not n:
            return []
        return [f"max_grad_norm was NaN or <= 0 in {n} step(s): those steps were not clipped (pass a number > 0)"]
