"""Proof that TF32 is really on (or really off): a matmul's error against a float64 reference."""

from __future__ import annotations

import torch

FP32_MAX_ERR = 2e-5   # above this, float32 math was not IEEE
TF32_MIN_ERR = 2e-5   # below this, TF32 was not really used
TF32_MAX_ERR = 5e-3   # above this, something worse than TF32 happened


def matmul_rel_error(device, region, n: int = 1024) -> float:
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=g, dtype=torch.float64)
    b = torch.randn(n, n, generator=g, dtype=torch.float64)
    ref = a @ b
    with region:
        out = a.float().to(device) @ b.float().to(device)
    return float((out.double().cpu() - ref).norm() / ref.norm())


def check(mp, device, *, expect_tf32: bool) -> tuple[bool, str]:
    err = matmul_rel_error(device, mp.autocast())
    if expect_tf32:
        ok = TF32_MIN_ERR < err < TF32_MAX_ERR
        return ok, (f"matmul relative error {err:.2e} is in TF32's range (TF32 is on)" if ok else
                    f"matmul relative error {err:.2e} is not in TF32's range ({TF32_MIN_ERR:g}..{TF32_MAX_ERR:g}): TF32 is not really on")
    ok = err < FP32_MAX_ERR
    return ok, (f"matmul relative error {err:.2e} is IEEE float32 (TF32 off)" if ok else
                f"matmul relative error {err:.2e} exceeds float32's {FP32_MAX_ERR:g}: TF32 or lower precision is on in fp32 mode")
