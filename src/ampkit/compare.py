"""How far a computation is from its reference: the one relative-error rule of every audit path."""

from __future__ import annotations

import math

from .formats import FloatFormat

__all__ = ["array_relative_error", "relative_error"]


def relative_error(dist: float, ref_norm: float, size: int, fmt: FloatFormat) -> float:
    """``||x - ref|| / ||ref||`` from the two 2-norms: ``dist = ||x - ref||``, ``ref_norm = ||ref||``,
    over ``size`` values held in the format ``fmt`` (the format the compared values live in).

    The rule, in this order:

    * either norm not finite (inf or NaN in a tensor: ``dist`` or ``ref_norm`` is inf or NaN):
      ``inf``. Values that cannot be compared are as far from the reference as it gets; never NaN,
      so that a maximum over steps or layers keeps it whatever the order, and any threshold flags it.
      A caller that leaves non-finite outputs to the non-finite finding skips ``inf`` itself.
    * ``dist == 0`` (identical values, including both all-zero): ``0.0``.
    * otherwise ``dist / max(ref_norm, floor)``, ``floor = sqrt(max(size, 1)) * fmt.smallest_normal``:
      the norm of ``size`` values at the format's smallest normal. A reference that is zero or tiny
      (a zero-initialised BatchNorm, a ReLU of negatives) against a small difference in the mode
      reads as the small error it is: ``x / 0`` is ``x / floor``, finite, neither 10**34 nor inf.
      For values the optimizer gets in float32, pass ``FP32`` (a floor of ~1e-38: none in practice).

    >>> from ampkit.formats import FP16
    >>> relative_error(0.0, 0.0, 4, FP16), relative_error(1.0, 4.0, 4, FP16)
    (0.0, 0.25)
    >>> relative_error(2.0**-14, 0.0, 4, FP16)   # x / 0: x / (sqrt(4) * 2**-14)
    0.5
    >>> relative_error(math.inf, 1.0, 4, FP16), relative_error(math.nan, 1.0, 4, FP16)
    (inf, inf)
    """
    if not (math.isfinite(dist) and math.isfinite(ref_norm)):
        return math.inf
    if dist == 0:
        return 0.0
    floor = math.sqrt(max(size, 1)) * fmt.smallest_normal
    return float(dist / max(ref_norm, floor))


def array_relative_error(audited, reference, fmt: FloatFormat) -> float:
    """:func:`relative_error` of NumPy-convertible data, in float64. ``audited`` and ``reference``
    are arrays, or lists of arrays (a layer with several outputs or inputs: the norms are taken over
    all of their values together)."""
    import numpy as np

    a_parts = audited if isinstance(audited, (list, tuple)) else [audited]
    r_parts = reference if isinstance(reference, (list, tuple)) else [reference]
    diff2 = ref2 = 0.0
    n = 0
    for a, r in zip(a_parts, r_parts):
        a = np.asarray(a, dtype=np.float64)
        r = np.asarray(r, dtype=np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            diff2 += float(np.sum((a - r) ** 2))
            ref2 += float(np.sum(r**2))
        n += r.size
    return relative_error(math.sqrt(diff2), math.sqrt(ref2), n, fmt)
