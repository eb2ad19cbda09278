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
