"""The what-if's summary of one float32 tensor, written once for every framework (:mod:`.whatif`).

:func:`summarize` takes NumPy-convertible data and a framework's ``cast``: the round trip of a float32
array through a low-precision dtype (``"fp16"``, ``"bf16"``, ``"e4m3"``, ``"e5m2"``) and back, done
by the framework's own dtype casts (PyTorch's ``.to(dtype)``, ``ml_dtypes``'s ``astype``: both round
to nearest even). It counts the elements, the nonzero ones and the amax, the binary exponents of
the nonzero finite values (``np.frexp``: exact), the fp16 and bf16 rounding errors of a strided
sample, and optionally the fp8 quantization of a matmul operand under each scaling. Non-finite
values count in the amax (NaN propagates) and, when inf, among the nonzero values; the histogram
holds finite values only. Nothing of the tensor is kept.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..formats import FP8_E4M3, FP8_E5M2
from .whatif import EMIN, FP8_ROWS, HIST_SAMPLE, NBINS, SAMPLE, TensorSummary

__all__ = ["AMAX_FLOOR", "Cast", "SATURATED", "summarize"]

#: (float32 array, "fp16"|"bf16"|"e4m3"|"e5m2") -> the float32 array of its round trip through that dtype
Cast = Callable[[np.ndarray, str], np.ndarray]
#: beyond the format's max by more than float32 rounding of ``x * (max / amax)``: saturated
SATURATED = 1 + 2.0**-20
#: an all-zero row or block still gets a finite scale (max / 2**-100 fits float32)
AMAX_FLOOR = 2.0**-100
ROUNDED = ("fp16", "bf16")
FP8_FORMATS = {"e4m3": FP8_E4M3, "e5m2": FP8_E5M2}


def sample_step(n: int) -> int:
    """The stride of the systematic sample of a tensor over HIST_SAMPLE elements: odd, so that it does
    not keep landing on the same columns of a power-of-two-wide tensor."""
    return math.ceil(n / HIST_SAMPLE) | 1


def _quantize(xs: np.ndarray, amax: np.ndarray, kind: str, cast: Cast) -> list:
    """[n, nonzero, lost, flushed, saturated, err^2, x^2] of ``xs`` scaled by max/amax (broadcast) and
    cast to fp8 ``kind`` and back."""
    fmt = FP8_FORMATS[kind]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # an inf/NaN amax: NaN errors, silently
        scale = (fmt.max_finite / np.maximum(amax, AMAX_FLOOR)).astype(np.float32)
        y = xs * scale
        q = cast(np.clip(y, -fmt.max_finite, fmt.max_finite), kind)
        err = (q / scale - xs).astype(np.float64)
    nz = xs != 0
    xd = xs.astype(np.float64)
    return [float(xs.size), float(nz.sum()), float((nz & (np.abs(y) < fmt.smallest_normal)).sum()),
            float((nz & (q == 0)).sum()), float((np.abs(y) > fmt.max_finite * SATURATED).sum()),
            float((err * err).sum()), float((xd * xd).sum())]


def _fp8(x: np.ndarray, kind: str, cast: Cast) -> dict:
    """The fp8 quantization of a matmul operand ``x`` ([..., K]: rows over the leading dims) under each
    scaling; amaxes from the whole tensor, the cast on a strided sample of rows."""
    k = x.shape[-1] if x.ndim else 1
    x2 = x.reshape(-1, k)
    a2 = np.abs(x2)
    step = max(1, math.ceil(x2.shape[0] / FP8_ROWS))
    xs = x2[::step]
    xb = np.pad(x2, ((0, 0), (0, (-k) % 32))).reshape(x2.shape[0], -1, 32)
    return {"tensorwise": _quantize(xs, a2.max(), kind, cast),
            "rowwise": _quantize(xs, a2.max(axis=1, keepdims=True)[::step], kind, cast),
            "channelwise": _quantize(xs, a2.max(axis=0, keepdims=True), kind, cast),
            "block32": _quantize(xb[::step], np.abs(xb).max(axis=2, keepdims=True)[::step], kind, cast)}


def summarize(x, cast: Cast, fp8: str | None = None, basic: bool = True) -> TensorSummary:
    """The summary of ``x`` (NumPy-convertible; taken as float32). ``fp8``: "e4m3"/"e5m2" to quantize
    it as a matmul operand; ``basic=False`` skips the histogram and rounding (an input summarized for
    fp8 only). Beyond HIST_SAMPLE elements the histogram is of a systematic sample, counts scaled up."""
    x = np.asarray(x, dtype=np.float32)
    flat = x.ravel()
    s = TensorSummary(count=int(flat.size))
    if not flat.size:
        return s
    s.amax = float(np.abs(flat).max())
    if basic:
        sample = flat if flat.size <= HIST_SAMPLE else flat[::sample_step(flat.size)]
        weight = flat.size / sample.size
        a = np.abs(sample)
        nz = a[a > 0]
        s.nonzero = nz.size * weight
        _, e = np.frexp(nz[np.isfinite(nz)])
        s.hist = (np.bincount(np.clip(e.astype(np.int64) - (1 + EMIN), 0, NBINS - 1), minlength=NBINS)
                  * weight).tolist()
        xs = sample[:: max(1, math.ceil(sample.size / SAMPLE))]
        xd = xs.astype(np.float64)
        for name in ROUNDED:
            with np.errstate(over="ignore", invalid="ignore"):  # beyond the format's range: inf, no error counted
                q = cast(xs, name)
                err = np.where(np.isfinite(q), q - xs, 0.0).astype(np.float64)
            s.rounding[name] = [float(xs.size), float(xd.sum()), float((xd * xd).sum()), float((err * err).sum())]
    if fp8:
        s.fp8 = _fp8(x, fp8, cast)
    return s
