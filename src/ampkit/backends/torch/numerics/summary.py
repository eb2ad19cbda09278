"""Summaries of float32 tensors for ``ampkit audit --what-if`` (:mod:`ampkit.audit.whatif`), PyTorch's side.

The summary itself is the neutral :func:`ampkit.audit.whatif_summary.summarize` (the Keras
backend's too): element count, nonzero count, amax, the exponent histogram, the float16 and
bfloat16 rounding errors of a strided sample, and optionally the fp8 quantization of a matmul
operand under each scaling. What is PyTorch's here is the round trip through each dtype, by torch's
own casts (``.to(torch.float16 / bfloat16 / float8_e4m3fn / float8_e5m2)``), and the tensor's values
as a float32 NumPy array: free on a CPU, one device-to-host copy (a sync) per tensor on a GPU.
Nothing of the tensor is kept.
"""

from __future__ import annotations

import numpy as np
import torch

from ....summaries import TensorSummary
from ....summaries import summarize as summarize_array

#: the what-if's dtypes as torch has them (the neutral summary's ``cast``)
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def torch_cast(a: np.ndarray, kind: str) -> np.ndarray:
    """``a`` (float32) through ``kind``'s torch dtype and back (``.to``: round to nearest even)."""
    return torch.from_numpy(np.ascontiguousarray(a)).to(DTYPES[kind]).float().numpy()


def summarize(x: torch.Tensor, fp8: str | None = None, basic: bool = True) -> TensorSummary:
    """The neutral summary of ``x``'s float32 values. ``fp8``: "e4m3"/"e5m2" to quantize it as a matmul
    operand; ``basic=False`` skips the histogram and rounding (an input summarized for fp8 only)."""
    values = x.detach().float().cpu().numpy()  # a GPU tensor: one copy to the host (a sync)
    return summarize_array(values, torch_cast, fp8, basic)
