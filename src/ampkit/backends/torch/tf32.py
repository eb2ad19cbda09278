"""TF32 flags: turn TF32 math on or off for a region and restore exactly what was there."""

from __future__ import annotations

import contextlib

import torch


def _new_api_targets() -> list:
    b = torch.backends
    targets = [b.cuda.matmul]
    conv = getattr(b.cudnn, "conv", None)
    rnn = getattr(b.cudnn, "rnn", None)
    targets += [t for t in (conv, rnn) if t is not None and hasattr(t, "fp32_precision")]
    return targets


def has_new_api() -> bool:
    return hasattr(torch.backends.cuda.matmul, "fp32_precision")


def get_flags() -> tuple:
    """A snapshot of the TF32-related flags, comparable and restorable."""
    if has_new_api():
        return ("new",) + tuple(t.fp32_precision for t in _new_api_targets())
    return ("legacy", torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)


def set_flags(snapshot: tuple) -> None:
    kind, *values = snapshot
    if kind == "new":
        for target, value in zip(_new_api_targets(), values):
            target.fp32_precision = value
    else:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = values


def flags_for(enabled: bool) -> tuple:
    if has_new_api():
        value = "tf32" if enabled else "ieee"
        return ("new",) + tuple(value for _ in _new_api_targets())
    return ("legacy", enabled, enabled)


def tf32_enabled() -> bool:
    """Whether CUDA matmuls currently run in TF32."""
    if has_new_api():
        return torch.backends.cuda.matmul.fp32_precision == "tf32"
    return bool(torch.backends.cuda.matmul.allow_tf32)


@contextlib.contextmanager
def tf32_scope(enabled: bool | None):
    """Within the region, TF32 is on (True), forced off (False) or left alone (None)."""
    if enabled is None:
        yield
        return
    before = get_flags()
    wanted = flags_for(enabled)
    if before == wanted:
        yield
        return
    set_flags(wanted)
    try:
        yield
    finally:
        set_flags(before)


class _Unchanged:
    """The TF32 flags left alone (fp16, bf16): a call runs as it is, a region costs nothing to enter."""

    __slots__ = ()
    _NULL = contextlib.nullcontext()  # re-entrant and reusable

    @staticmethod
    def run(fn, /, *args, **kwargs):
        return fn(*args, **kwargs)

    def region(self):
        return self._NULL


class _Scoped:
    """TF32 turned on (tf32) or forced off (fp32) for a call or a region; the flags restored afterwards.

    Each call or region entry gets a fresh :func:`tf32_scope`, which restores what it found: regions
    nest, and threads stay independent."""

    __slots__ = ("_enabled",)

    def __init__(self, enabled: bool) -> None:
        self._enabled = enabled

    def run(self, fn, /, *args, **kwargs):
        with tf32_scope(self._enabled):
            return fn(*args, **kwargs)

    def region(self):
        return tf32_scope(self._enabled)


def tf32_math(enabled: bool | None) -> _Unchanged | _Scoped:
    """A mode's TF32 handling (``Precision.tf32``), chosen once: ``run(fn, ...)`` calls ``fn`` under it
    (backward, the optimizer step) and ``region()`` makes a context for the forward pass."""
    return _Unchanged() if enabled is None else _Scoped(enabled)
