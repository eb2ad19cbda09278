"""TF32 flags: turn TF32 math on or off for a region and restore exactly what was there.

torch >= 2.9 has per-backend ``fp32_precision`` settings and raises when the legacy
``allow_tf32`` flags and the new API are mixed (pytorch #179445), so this module uses the
new API when it exists and the legacy flags only on older torch, never both.
"""

from __future__ import annotations

import contextlib
import functools

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


_UNCHANGED = contextlib.nullcontext()  # re-entrant and reusable: entering it costs next to nothing


def region_maker(enabled: bool | None):
    """A zero-argument maker of a mode's TF32 region (``Precision.tf32``), chosen once per engine.

    True/False: a fresh :func:`tf32_scope` per entry (each entry restores what it found, so regions
    nest and threads stay independent); None (the flags are left alone): one shared no-op context.
    """
    if enabled is None:
        return lambda: _UNCHANGED
    return functools.partial(tf32_scope, enabled)
