"""Facts of the floating-point formats that mixed precision uses (see FIELD.md, "Number formats")."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class FloatFormat:
    name: str
    max_finite: float
    smallest_normal: float
    smallest_subnormal: float
    mantissa_bits: int

    @property
    def eps(self) -> float:
        """Relative spacing of values at 1.0 (2**-mantissa_bits)."""
        return 2.0 ** -self.mantissa_bits

    def headroom_log2(self, amax: float) -> float:
        """log2(max_finite / amax): how many doublings are left before overflow (inf when amax is 0)."""
        if amax <= 0 or not math.isfinite(amax):
            return math.inf if amax == 0 else -math.inf
        return math.log2(self.max_finite / amax)


FP32 = FloatFormat("fp32", 3.4028234663852886e38, 2.0**-126, 2.0**-149, 23)
FP16 = FloatFormat("fp16", 65504.0, 2.0**-14, 2.0**-24, 10)
BF16 = FloatFormat("bf16", 3.3895313892515355e38, 2.0**-126, 2.0**-133, 7)
FP8_E4M3 = FloatFormat("fp8_e4m3", 448.0, 2.0**-6, 2.0**-9, 3)
FP8_E5M2 = FloatFormat("fp8_e5m2", 57344.0, 2.0**-14, 2.0**-16, 2)

FORMATS = {f.name: f for f in (FP32, FP16, BF16, FP8_E4M3, FP8_E5M2)}


#: an underflow finding is raised when more than this share of nonzero values is *lost*: flushed
#: to zero or kept as a subnormal with fewer than LOST_BITS significant bits
UNDERFLOW_THRESHOLD = 0.05
LOST_BITS = 4


def lost_below(fmt: FloatFormat) -> float:
    """Magnitudes under this keep fewer than ``LOST_BITS`` significant bits in ``fmt`` (subnormals
    ``k * smallest_subnormal`` with ``k < 2**(LOST_BITS-1)``, and what rounds to zero): a rounding
    error of 1/16 or more. Subnormals above it keep a usable value, so a model whose gradients are
    merely subnormal (attention queries at initialisation, measured on HF BERT: 96% subnormal at
    GradScaler's 2**16, 0.1% flushed) is not told it underflows."""
    return fmt.smallest_subnormal * 2.0 ** (LOST_BITS - 1)


#: a leaf module counts as precision-sensitive when its output differs from the fp32 reference by
#: more than this many of the format's rounding units (2**-(mantissa_bits+1)): 64 units is 25% in
#: bf16 and 3.1% in fp16. Errors of a few to ~15 units are what rounding every layer's output costs
#: in a deep network (measured on torchvision/timm ResNets, MobileNet, HF BERT/GPT-2: 0.4-5% in
#: bf16, 0.05-0.7% in fp16); far above that a module cancels or amplifies what the format lost.
PRECISION_UNITS = 64


def rounding_unit(fmt: FloatFormat) -> float:
    """The format's unit roundoff, 2**-(mantissa_bits+1): the relative error of one rounding."""
    return 2.0 ** -(fmt.mantissa_bits + 1)


def precision_threshold(fmt: FloatFormat) -> float:
    """The relative error above which a module's output is imprecise *for this format*."""
    return PRECISION_UNITS * rounding_unit(fmt)


#: a model's output is beyond what its format costs from this many rounding units (12.5% in bf16, 1.6% in
#: fp16): rounding every layer's output costs a deep network a few to ~15 units (ampkit.audit.model_error)
MODEL_UNITS = 32


def module_limit(fmt: FloatFormat) -> float:
    """The relative error above which a module that makes its error itself is a finding, the same rule
    for fp16 and bf16 (issue #50): beyond what rounding costs a whole deep network in the format
    (:data:`MODEL_UNITS` units: 12.5% in bf16) and never below fp16's own per-module threshold
    (:data:`PRECISION_UNITS` fp16 units, 3.1%): a bf16 module that grows its error to 14% is judged as
    fp16 would judge it, while bf16's ordinary roundings (0.4-5%) stay below."""
    return max(MODEL_UNITS * rounding_unit(fmt), precision_threshold(FP16))


def format_of(mode: str) -> FloatFormat:
    return FP16 if mode == "fp16" else BF16
