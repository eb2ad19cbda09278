"""What a backend measures for the what-if, written once for every framework: the summary of one float32
tensor and of one module (:mod:`ampkit.audit.whatif` judges them)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .compare import relative_error
from .formats import FORMATS, FP8_E4M3, FP8_E5M2, UNDERFLOW_THRESHOLD

#: a module whose float32 output gradients are at least this share rounding noise (float64 check) has none to lose
NOISE_ONLY = 0.5

#: the float32 exponent range of the histogram: bin ``i`` counts nonzero finite |x| in [2**e, 2**(e+1)), e = i + EMIN
EMIN, EMAX = -149, 127
NBINS = EMAX - EMIN + 1
#: elements of a tensor whose rounding error is measured (a strided sample)
SAMPLE = 16384
#: tensors up to this many elements get an exact histogram; larger ones a systematic sample of about
#: this many elements (its counts scaled to the whole tensor; amax is always the whole tensor's)
HIST_SAMPLE = 2**18
#: rows of a matmul operand whose fp8 quantization is measured (a strided sample)
FP8_ROWS = 128


@dataclass
class TensorSummary:
    """What is kept of one tensor (merged over calls and steps): see docs/internals.md."""

    count: int = 0
    nonzero: int = 0
    amax: float = 0.0
    hist: list = field(default_factory=lambda: [0] * NBINS)
    rounding: dict = field(default_factory=dict)   # fp16/bf16 -> [sample n, sum x, sum x^2, sum err^2]
    fp8: dict = field(default_factory=dict)        # scaling -> [n, nonzero, lost, flushed, saturated, err^2, x^2]

    def merge(self, other: TensorSummary) -> None:
        self.count += other.count
        self.nonzero += other.nonzero
        self.amax = max(self.amax, other.amax) if math.isfinite(other.amax) else other.amax
        self.hist = [a + b for a, b in zip(self.hist, other.hist)]
        for mine, theirs in ((self.rounding, other.rounding), (self.fp8, other.fp8)):
            for k, v in theirs.items():
                mine[k] = [a + b for a, b in zip(mine[k], v)] if k in mine else list(v)

    def below(self, limit: float, scale: float = 1.0) -> float:
        """Nonzero values with ``|x| * scale < limit`` (``limit`` a power of two: exact for a power-of-two
        scale; otherwise the bin across the limit counts in proportion to its log2 width)."""
        t = math.log2(limit / scale)
        whole = math.floor(t)
        n = sum(self.hist[: max(0, min(NBINS, whole - EMIN))])
        i = whole - EMIN
        if 0 <= i < NBINS:
            n += self.hist[i] * (t - whole)
        return n

    def at_least(self, limit: float, scale: float = 1.0) -> float:
        """Nonzero values with ``|x| * scale >= limit``, from the histogram (see :meth:`below`)."""
        return self.nonzero - self.below(limit, scale)

    def share_below(self, limit: float, scale: float = 1.0) -> float:
        return self.below(limit, scale) / self.nonzero if self.nonzero else 0.0

    def noise(self, fmt: str) -> tuple[float, float] | None:
        """(rounding error relative to the tensor's norm, relative to its spread around the mean) in
        ``fmt``, from the sample; None when not measured."""
        r = self.rounding.get(fmt)
        if not r or not r[0]:
            return None
        n, s1, s2, e2 = r
        spread2 = max(s2 - s1 * s1 / n, 0.0)
        rel = relative_error(math.sqrt(e2), math.sqrt(s2), int(n), FORMATS[fmt])  # the audit's one rule
        # a constant (to float32's resolution) has no spread to lose
        to_spread = math.sqrt(e2 / spread2) if spread2 > s2 * 2.0**-46 and e2 > 0 else 0.0
        return rel, to_spread

    def fp8_stats(self, scaling: str) -> dict | None:
        r = self.fp8.get(scaling)
        if not r:
            return None
        n, nz, lost, flushed, saturated, e2, x2 = r
        snr = math.inf if e2 == 0 else (10 * math.log10(x2 / e2) if x2 > 0 else -math.inf)
        return {"lost_frac": lost / nz if nz else 0.0, "flushed_frac": flushed / nz if nz else 0.0,
                "saturated_frac": saturated / nz if nz else 0.0, "snr_db": snr}

    def to_dict(self) -> dict:
        return {"count": self.count, "nonzero": self.nonzero, "amax": self.amax}


@dataclass
class ModuleSummary:
    """One module (layer) of the float32 run, in execution order. ``fp8_input``: for a matmul layer an
    fp8 recipe converts (torch.nn.Linear, keras Dense/EinsumDense), its input; None otherwise."""

    name: str
    type: str
    leaf: bool = True
    calls: int = 0
    fwd: TensorSummary = field(default_factory=TensorSummary)
    grad: TensorSummary = field(default_factory=TensorSummary)
    fp8_input: TensorSummary | None = None
    #: tensors computed in the module's own code (matmul/bmm/einsum/sdpa outputs, sums, functional
    #: activations) that autocast holds in the low format, and the op whose output reached the largest
    inner: TensorSummary | None = None
    inner_op: str | None = None
    #: whether autocast holds its outputs in the low format (False: float32 there, as timm's drop_path
    #: after a float32 layer scale; unknown: True)
    fwd_low: bool = True
    #: the largest gradient of its own parameters (what a loss scaler checks); 0: none, or not observed
    param_grad_amax: float = 0.0
    #: the share of its nonzero float32 output gradients that are rounding noise (a float64 pass says so:
    #: the true values are zero, e.g. attention over one token); None: not checked
    grad_noise: float | None = None
    #: of its nonzero float32 output gradients, the share that is not noise yet lost at the default scale (the
    #: same float64 pass says so, as the audit's ``grad_signal_lost_frac``); None: not checked
    grad_signal_lost: float | None = None
    #: a softmax its own code computes, rerun on inputs rounded to each format: {format: the largest relative
    #: error of its output} and the op (an absolute error of a softmax's input is a relative one of its output)
    amplified: dict = field(default_factory=dict)
    amplified_op: str | None = None
    #: {format: (output error, input error)} a run of that format carries into this leaf, measured by one
    #: forward of the format against float32 (a backend that does not measure it leaves it empty)
    carried: dict = field(default_factory=dict)

    def amplify(self, op: str, errors: dict) -> None:
        for fmt, err in errors.items():
            if err > self.amplified.get(fmt, -1.0):
                self.amplified[fmt] = err
                self.amplified_op = op

    @property
    def noise_only(self) -> bool:
        """Its output gradients are float32 rounding noise (mostly) and what is not noise is kept at the default
        scale: losing them loses nothing. A module whose signal the default scale loses in part is judged by all
        its gradients (issue #46: the real audit finds that share lost; the what-if must not call it safe)."""
        return (self.grad_noise is not None and self.grad_noise >= NOISE_ONLY
                and (self.grad_signal_lost is None or self.grad_signal_lost <= UNDERFLOW_THRESHOLD))

    @property
    def fp8_eligible(self) -> bool:
        return self.fp8_input is not None

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
