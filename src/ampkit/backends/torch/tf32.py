"""TF32 flags: turn TF32 math on or off for a region and restore exactly what was there."""

from __future__ import annotations

import contextlib
import functools

import torch


@functools.lru_cache(maxsize=1)
def _new_api_targets() -> tuple:
    """The objects whose ``fp32_precision`` holds the flags (torch's module-level singletons: looked
    up once; the engine enters a TF32 scope three times a step, and the lookups were most of its cost
    on a small CPU model: 43 us a scope, 0.24 ms of a 3.8 ms step, #45)."""
    b = torch.backends
    targets = [b.cuda.matmul]
    conv = getattr(b.cudnn, "conv", None)
    rnn = getattr(b.cudnn, "rnn", None)
    targets += [t for t in (conv, rnn) if t is not None and hasattr(t, "fp32_precision")]
    return tuple(targets)


@functools.lru_cache(maxsize=1)
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


@functools.lru_cache(maxsize=2)
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


def tf32_math(enabled: bool | None, device_type: str = "cuda") -> _Unchanged | _Scoped:
    """A mode's TF32 handling (``Precision.tf32``), chosen once: ``run(fn, ...)`` calls ``fn`` under it
    (backward, the optimizer step) and ``region()`` makes a context for the forward pass.

    The flags are CUDA's and cuDNN's: on any other device (``device_type``) they change no math the
    engine runs, and they are left alone. Flipping and restoring them three times a step cost an fp32
    step on a CPU 0.2-0.6 ms against 3.6 ms for the same step by hand (a small MLP, one thread), which
    raised bench's speedups of every mode against fp32 on small CPU models (#45)."""
    return _Unchanged() if enabled is None or device_type != "cuda" else _Scoped(enabled)
