"""Small pieces the what-if's predictions share (:mod:`.whatif`, :mod:`.whatif_bf16`): the value that rounds
to infinity in a format, a JSON number, the rounding-noise limit."""

from __future__ import annotations

import math

from ..formats import LOST_BITS, FloatFormat

#: a module's rounding noise is large when it is at least this share of the spread of its float32
#: output (fewer than LOST_BITS bits of the spread survive)
NOISE_TO_SPREAD = 2.0**-LOST_BITS


def overflow_at(fmt: FloatFormat) -> float:
    """The smallest magnitude that rounds to infinity in ``fmt`` (round to nearest: max_finite plus
    half a unit in the last place; 65520 for fp16)."""
    return fmt.max_finite + 2.0 ** (math.floor(math.log2(fmt.max_finite)) - fmt.mantissa_bits - 1)


def _r(x, digits=6):
    """A JSON number of ``digits`` significant digits (None for inf/NaN: JSON has neither)."""
    return None if x is None or not math.isfinite(x) else float(f"{float(x):.{digits}g}")
