"""``mp.autocast()``: the forward region of a mode."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

import torch

from ....errors import AutocastDisabledError
from ....precision import Precision

__all__ = ["region_maker"]


class _Region:
    __slots__ = ("_stack",)

    def __init__(self) -> None:
        self._stack: list = []

    def __exit__(self, *exc):
        self._stack.pop().__exit__(*exc)
        return False


class _MathRegion(_Region):
    """fp32 / tf32: TF32 turned on or forced off within, the flags restored afterwards."""

    __slots__ = ("_make_scope",)

    def __init__(self, make_scope: Callable) -> None:
        super().__init__()
        self._make_scope = make_scope

    def __enter__(self):
        ctx = self._make_scope()
        ctx.__enter__()
        self._stack.append(ctx)
        return self


class _AutocastRegion(_Region):
    """fp16 / bf16: ``torch.autocast`` in the mode's dtype; refuses to run when torch turned it off."""

    __slots__ = ("_device_type", "_dtype", "_mode", "_ctx")

    def __init__(self, device_type: str, dtype: torch.dtype, mode: str) -> None:
        super().__init__()
        self._device_type, self._dtype, self._mode = device_type, dtype, mode
        self._ctx = torch.autocast(device_type, dtype=dtype)

    def __enter__(self):
        ctx = torch.autocast(self._device_type, dtype=self._dtype) if self._stack else self._ctx
        ctx.__enter__()
        if not torch.is_autocast_enabled(self._device_type):
            ctx.__exit__(None, None, None)
            raise self._disabled()
        self._stack.append(ctx)
        return self

    def _disabled(self) -> AutocastDisabledError:
        dev = self._device_type
        with warnings.catch_warnings(record=True) as caught:  # only now: learn why
            warnings.simplefilter("always")
            torch.autocast(dev, dtype=self._dtype)
        said = "; ".join(str(w.message) for w in caught) or "autocast reports itself disabled"
        return AutocastDisabledError(
            f"torch.autocast({dev!r}, dtype={self._dtype}) did not turn on ({said}); "
            f"refusing to run {self._mode} as float32"
        )


def region_maker(precision: Precision, device_type: str, tf32_region: Callable) -> Callable[[], _Region]:
    """The maker of a mode's region, chosen once per engine. ``tf32_region``: makes the mode's TF32
    scope (``region`` of :func:`..tf32.tf32_math`)."""
    if precision.autocast:
        return functools.partial(_AutocastRegion, device_type, getattr(torch, precision.compute_dtype), precision.mode)
    return functools.partial(_MathRegion, tf32_region)
