"""Range checks the frozen configs run once, at construction: the same rule for the CLI and the library."""

from __future__ import annotations

import math

from .errors import UsageError

__all__ = ["MAX_BATCH", "MAX_CLASSES", "MAX_EPOCHS", "MAX_LOSS_SCALE", "MAX_MEMORY_BYTES", "MAX_SAMPLE_ELEMENTS",
           "MAX_SEEDS", "MAX_STEPS", "MAX_TIMEOUT_S", "float_in", "int_in", "shape_from_data"]

#: the largest values that still describe a run someone means to finish
MAX_STEPS = 1_000_000
MAX_EPOCHS = 10_000
MAX_SEEDS = 1000
MAX_BATCH = 2**20
MAX_CLASSES = 2**20
MAX_SAMPLE_ELEMENTS = 2**30
MAX_MEMORY_BYTES = 2**60
MAX_LOSS_SCALE = 2.0**64
MAX_TIMEOUT_S = 7 * 24 * 3600


def int_in(value, flag: str, lo: int, hi: int) -> int:
    """An integer option within [lo, hi] (None passes: not given); the message states the bounds."""
    if value is None:
        return value
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise UsageError(f"{flag} must be >= {lo} and at most {hi:,}; received {value}")
    return value


def float_in(value, flag: str, lo: float, hi: float, *, lo_open: bool = False) -> float:
    """A finite number within [lo, hi] (or (lo, hi] with ``lo_open``; None passes: not given)."""
    if value is None:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):  # True is not 1.0, "1024" is not a number
        raise UsageError(f"{flag} must be a number; received {value!r}")
    ok = math.isfinite(value) and (value > lo if lo_open else value >= lo) and value <= hi
    if not ok:
        what = ("a positive number" if lo == 0 else f"a number greater than {lo:g}") if lo_open \
            else f"a number >= {lo:g}"
        raise UsageError(f"{flag} must be {what}, finite and at most {hi:g}; received {value}")
    return value


def shape_from_data(given, data_shape, spec: str):
    """The per-sample input shape of an audit fed ``--data``: the data's own (``data_shape``, None when
    its inputs are not one array); ``given`` (``--input-shape``) only where it says the same -- one
    that contradicts the data is a usage error, never a shape silently ignored."""
    if data_shape is None:
        return given
    data_shape = tuple(int(d) for d in data_shape)
    if given is not None and tuple(int(d) for d in given) != data_shape:
        shown = ",".join(map(str, given))
        raise UsageError(f"--input-shape {shown} contradicts the data {spec}, whose inputs are "
                         f"{','.join(map(str, data_shape)) or 'scalars'} per sample: drop --input-shape (the audit "
                         "reads the shape from --data) or make it match")
    return data_shape
