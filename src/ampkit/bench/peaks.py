"""Dense peak TFLOP/s of common GPUs per precision, for MFU. None where unknown.

Dense (no sparsity) figures from the vendors' data sheets; fp16/bf16 with fp32 accumulate.
fp32 mode runs on the CUDA cores; tf32 on the tensor cores.
"""

from __future__ import annotations

import re

# (pattern on the device name, {mode: TFLOP/s}) — first match wins, so specific names first
PEAKS: list[tuple[str, dict[str, float]]] = [
    (r"H200", {"fp32": 67.0, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4}),
    (r"H100.*PCIe", {"fp32": 51.2, "tf32": 378.0, "fp16": 756.0, "bf16": 756.0}),
    (r"H100", {"fp32": 67.0, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4}),
    (r"A100", {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0}),
    (r"L40S", {"fp32": 91.6, "tf32": 183.0, "fp16": 362.0, "bf16": 362.0}),
    (r"\bL4\b", {"fp32": 30.3, "tf32": 60.0, "fp16": 121.0, "bf16": 121.0}),
    (r"\bA10\b|A10G", {"fp32": 31.2, "tf32": 62.5, "fp16": 125.0, "bf16": 125.0}),
    (r"V100", {"fp32": 15.7, "fp16": 125.0}),
    (r"\bT4\b", {"fp32": 8.1, "fp16": 65.0}),
    (r"RTX 4090", {"fp32": 82.6, "tf32": 82.6, "fp16": 165.2, "bf16": 165.2}),
    (r"RTX 3090", {"fp32": 35.6, "tf32": 35.6, "fp16": 71.0, "bf16": 71.0}),
]


def peak_tflops(device_name: str | None, mode: str) -> float | None:
    if not device_name:
        return None
    for pattern, table in PEAKS:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            return table.get(mode)
    return None
