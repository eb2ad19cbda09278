"""Device-side summaries of float32 tensors for ``ampkit audit --what-if`` (:mod:`ampkit.audit.whatif`).

One summary is a float64 vector, computed where the tensor lives and pulled to the host with every
other summary of the step in one transfer: element count, nonzero count, amax, the exponent
histogram (``torch.frexp``: exact binary exponents, no bit manipulation), the float16 and bfloat16
rounding errors of a strided sample (real ``.to(dtype)`` round trips), and optionally the fp8
quantization of a matmul operand (``torch.float8_e4m3fn`` / ``torch.float8_e5m2`` casts) under
each scaling. Nothing of the tensor is kept.
"""

from __future__ import annotations

import math

import torch

from ....audit.whatif import EMIN, FP8_ROWS, HIST_SAMPLE, NBINS, SAMPLE, SCALINGS, TensorSummary
from ....formats import FP8_E4M3, FP8_E5M2

#: the vector's layout: [count, nonzero, amax] + hist + rounding (fp16, bf16: 4 each) + fp8 (7 per scaling)
HEAD, ROUND_N, FP8_N = 3, 4, 7
LENGTH = HEAD + NBINS + 2 * ROUND_N + len(SCALINGS) * FP8_N
_ROUND = (("fp16", torch.float16), ("bf16", torch.bfloat16))
#: beyond the format's max by more than float32 rounding of ``x * (max / amax)``: saturated
SATURATED = 1 + 2.0**-20
#: an all-zero row or block still gets a finite scale (max / 2**-100 fits float32)
AMAX_FLOOR = 2.0**-100
FP8_DTYPES = {"e4m3": (torch.float8_e4m3fn, FP8_E4M3), "e5m2": (torch.float8_e5m2, FP8_E5M2)}


def sample_step(n: int) -> int:
    """The stride of the systematic sample of a tensor over HIST_SAMPLE elements: odd, so that it does
    not keep landing on the same columns of a power-of-two-wide tensor."""
    return math.ceil(n / HIST_SAMPLE) | 1


def _hist(a: torch.Tensor) -> torch.Tensor:
    """Counts of |x| per binary exponent, and (bin NBINS) the zeros; non-finite values land in some
    bin, and the amax says they are there."""
    _, e = torch.frexp(a)  # a = m * 2**e, m in [0.5, 1): floor(log2 a) = e - 1; frexp(0) = (0, 0)
    counts = torch.bincount((e - (1 + EMIN)).clamp_(0, NBINS - 1), minlength=NBINS)
    zeros = a.numel() - torch.count_nonzero(a)
    counts[-1 - EMIN] -= zeros  # the zeros' exponent 0 landed in the bin of [0.5, 1)
    return torch.cat([counts, zeros.reshape(1)])


def _rounding(flat: torch.Tensor) -> list[torch.Tensor]:
    xs = flat[::max(1, math.ceil(flat.numel() / SAMPLE))]
    xd = xs.double()
    out = []
    for _, dt in _ROUND:
        q = xs.to(dt).float()
        err = torch.where(torch.isfinite(q), q - xs, 0.0).double()
        out += [xd.new_tensor(float(xs.numel())), xd.sum(), (xd * xd).sum(), (err * err).sum()]
    return out


def _quantize(xs: torch.Tensor, amax: torch.Tensor, kind: str) -> list[torch.Tensor]:
    """[n, nonzero, lost, flushed, saturated, err^2, x^2] of ``xs`` scaled by max/amax (broadcast)
    and cast to fp8 ``kind`` and back."""
    dt, fmt = FP8_DTYPES[kind]
    scale = fmt.max_finite / amax.clamp(min=AMAX_FLOOR)
    y = xs * scale
    q = y.clamp(-fmt.max_finite, fmt.max_finite).to(dt).float()
    nz = xs != 0
    err = (q / scale - xs).double()
    xd = xs.double()
    return [xd.new_tensor(float(xs.numel())), nz.sum().double(), (nz & (y.abs() < fmt.smallest_normal)).sum().double(),
            (nz & (q == 0)).sum().double(), (y.abs() > fmt.max_finite * SATURATED).sum().double(), (err * err).sum(),
            (xd * xd).sum()]


def _fp8(x: torch.Tensor, kind: str) -> list[torch.Tensor]:
    """The fp8 quantization of a matmul operand ``x`` ([..., K]: rows over the leading dims) under each
    scaling; amaxes from the whole tensor, the cast on a strided sample of rows."""
    k = x.shape[-1] if x.dim() else 1
    x2 = x.reshape(-1, k)
    a2 = x2.abs()
    step = max(1, math.ceil(x2.shape[0] / FP8_ROWS))
    xs = x2[::step]
    out = _quantize(xs, a2.max(), kind)
    out += _quantize(xs, a2.amax(dim=1, keepdim=True)[::step], kind)
    out += _quantize(xs, a2.amax(dim=0, keepdim=True), kind)
    pad = (-k) % 32
    xb = torch.nn.functional.pad(x2, (0, pad)).reshape(x2.shape[0], -1, 32)
    bmax = xb.abs().amax(dim=2, keepdim=True)
    out += _quantize(xb[::step], bmax[::step], kind)
    return out


def summarize(x: torch.Tensor, fp8: str | None = None, basic: bool = True) -> torch.Tensor:
    """The summary vector of ``x`` (float64, on its device). ``fp8``: "e4m3"/"e5m2" to quantize it as a
    matmul operand; ``basic=False`` skips the histogram and rounding (an input summarized for fp8 only)."""
    x = x.detach().float()
    flat = x.reshape(-1)
    n = flat.numel()
    parts: list[torch.Tensor] = []
    zero = flat.new_zeros((), dtype=torch.float64)
    if basic and n:
        lo, hi = torch.aminmax(flat)
        amax = torch.maximum(-lo, hi).double()
        xs = flat if n <= HIST_SAMPLE else flat[::sample_step(n)].contiguous()
        hist = _hist(xs.abs()).double() * (n / xs.numel())  # counts of the whole tensor (estimated beyond HIST_SAMPLE)
        parts = [zero + n, n - hist[NBINS], amax, hist[:NBINS]]
        parts += _rounding(xs)
    else:
        amax = flat.abs().max().double() if n else zero
        parts = [zero + n, zero, amax, flat.new_zeros(NBINS, dtype=torch.float64)] + [zero] * (2 * ROUND_N)
    parts += _fp8(x, fp8) if fp8 and n else [zero] * (len(SCALINGS) * FP8_N)
    return torch.cat([p.reshape(-1) for p in parts])


def parse(vec: list[float]) -> TensorSummary:
    """A host vector (:func:`summarize`'s, as a list) as a :class:`TensorSummary`."""
    s = TensorSummary(count=int(vec[0]), nonzero=vec[1], amax=float(vec[2]),
                      hist=list(vec[HEAD:HEAD + NBINS]))
    i = HEAD + NBINS
    for name, _ in _ROUND:
        if vec[i]:
            s.rounding[name] = list(vec[i:i + ROUND_N])
        i += ROUND_N
    for scaling in SCALINGS:
        if vec[i]:
            s.fp8[scaling] = list(vec[i:i + FP8_N])
        i += FP8_N
    return s
