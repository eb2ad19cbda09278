"""Doctor for PyTorch: a real self-test per mode, and the work doctor times (the flow: :mod:`ampkit.doctor.driver`)."""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...errors import one_line
from ...precision import get_precision
from ...rounds import Work
from ...words import THRESHOLD as ACCEL_THRESHOLD
from . import doctor_work, tf32_probe
from .devices import auto_fingerprint, mode_support
from .doctor_ops import PlainSGD
from .engine import MixedPrecision

__all__ = ["ACCEL_THRESHOLD", "TorchDoctor", "selftest"]


# ---------------------------------------------------------------- self-tests
def _expected_dtype(mode: str) -> torch.dtype:
    precision = get_precision(mode)
    return getattr(torch, precision.compute_dtype) if precision.autocast else torch.float32


def selftest(mode: str, device: torch.device) -> tuple[str, str]:
    """Really run ``mode`` on ``device``; return ("pass"|"fail", what was checked or what broke)."""
    if mode == "fp8":  # a real fp8 step through the engine where torchao is installed (doctor_fp8)
        from .doctor_fp8 import engine_selftest

        return engine_selftest(device) or _selftest_fp8(device)
    try:
        return _selftest_training(mode, device)
    except Exception as exc:  # a self-test reports, it never crashes the doctor
        return "fail", one_line(exc, 300)


def _selftest_training(mode: str, device: torch.device) -> tuple[str, str]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 8)).to(device)
    seen: list[torch.dtype] = []
    hooks = [m.register_forward_hook(lambda mod, i, o: seen.append(o.dtype)) for m in model if isinstance(m, nn.Linear)]
    opt = PlainSGD(model.parameters(), lr=0.1)  # not torch.optim: see PlainSGD
    mp = MixedPrecision(mode, device, init_scale=2.0**8, model=model)
    x = torch.randn(16, 32, device=device)
    y = torch.randint(0, 8, (16,), device=device)
    w0 = model[0].weight.detach().clone()
    with mp.autocast():
        loss = F.cross_entropy(model(x), y)
    mp.backward(loss)
    result = mp.step(opt, zero_grad=True)
    for h in hooks:
        h.remove()
    want = _expected_dtype(mode)
    checks = []
    if any(d != want for d in seen):
        return "fail", f"Linear outputs inside autocast were {sorted({str(d) for d in seen})}, expected {want}"
    checks.append(f"Linear outputs {str(want).replace('torch.', '')}")
    bad = [str(p.dtype) for p in model.parameters() if p.dtype != torch.float32]
    if bad:
        return "fail", f"master weights are not float32 after a step: {bad}"
    checks.append("master weights float32")
    loss_value = float(loss.detach())  # host-device sync: fine in a self-test
    if not math.isfinite(loss_value):
        return "fail", f"loss is {loss_value} on a clean batch"
    if result.skipped or torch.equal(w0, model[0].weight):
        return "fail", "the optimizer step did not change the weights on a clean batch"
    checks.append("step updates weights")
    if get_precision(mode).loss_scaling:
        before = mp.get_scale()
        with mp.autocast():
            loss = F.cross_entropy(model(x), y)
        mp.backward(loss)
        model[0].weight.grad[0, 0] = float("inf")  # injected overflow
        w1 = model[0].weight.detach().clone()
        r = mp.step(opt, zero_grad=True)
        if not r.skipped or not torch.equal(w1, model[0].weight):
            return "fail", "an injected inf gradient was not skipped"
        if mp.get_scale() != before * 0.5:
            return "fail", f"loss scale did not back off on inf: {before} -> {mp.get_scale()}"
        checks.append(f"inf gradient skipped, scale {before:g} -> {mp.get_scale():g}")
    if mode in ("tf32", "fp32") and device.type == "cuda":
        ok, detail = tf32_probe.check(mp, device, expect_tf32=(mode == "tf32"))
        if not ok:
            return "fail", detail
        checks.append(detail)
    return "pass", "; ".join(checks)


def _selftest_fp8(device: torch.device) -> tuple[str, str]:
    ok, why = mode_support("fp8", device)
    if not ok:
        return "skip", why
    try:
        a = torch.randn(64, 64, device=device)
        b = torch.randn(64, 64, device=device)
        ref = a @ b.t()
        fa, fb = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        one = torch.tensor(1.0, device=device)
        out = torch._scaled_mm(fa, fb.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        out = out[0] if isinstance(out, tuple) else out
        rel = float((out.float() - ref).norm() / ref.norm())
        if not rel < 0.15:
            return "fail", f"fp8 scaled matmul relative error {rel:.3g} (expected < 0.15)"
        return "pass", f"fp8 e4m3 scaled matmul runs, relative error {rel:.3g} vs fp32"
    except Exception as exc:
        return "fail", f"fp8 scaled matmul failed: {one_line(exc)}"[:300]


# ---------------------------------------------------------------- the driver's operations
class TorchDoctor:
    """:class:`ampkit.doctor.ops.DoctorOps` for PyTorch (the flow: :mod:`ampkit.doctor.driver`)."""

    @contextlib.contextmanager
    def doctor_session(self, target, threads=None):
        from .engine.fp8 import found_only  # asking whether fp8 trains here must not import torchao (start-up)

        with doctor_work.measuring_threads(torch.device(target.device), threads), found_only():
            yield

    def selftest(self, mode: str, target) -> tuple[str, str]:
        return selftest(mode, torch.device(target.device))

    def doctor_work(self, mode: str, target) -> Work:
        return doctor_work.work(mode, torch.device(target.device))

    def auto_fingerprint(self, target) -> dict:
        return auto_fingerprint(torch.device(target.device))

    def doctor_variants(self, supported, target, say, *, thorough: bool = False) -> dict[str, dict]:
        return {}  # one PyTorch: nothing beside the main table
