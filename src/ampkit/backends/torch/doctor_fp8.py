"""The doctor's fp8 self-test for PyTorch: a real fp8 training step through the engine (torchao).
Without torchao (``ampkit[fp8]``) the doctor keeps its scaled-matmul check of the hardware
(:func:`.doctor._selftest_fp8`)."""

from __future__ import annotations

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...doctor.ops import fp8_loss_gap
from ...errors import one_line
from .engine import MixedPrecision
from .engine.fp8 import fp8_support, torchao_installed

__all__ = ["engine_selftest"]


def engine_selftest(device: torch.device) -> tuple[str, str] | None:
    """One fp8 step of a small MLP through ``MixedPrecision("fp8")`` (emulated where the hardware has
    no fp8), checked against the same step in bf16; None without torchao (the caller says why)."""
    ok, emulated, why = fp8_support(device)
    if not ok:
        return None if not torchao_installed() else ("fail", why)
    try:
        return _step(device, emulated)
    except Exception as exc:  # a self-test reports, it never crashes the doctor
        return "fail", f"fp8 step through the engine failed: {one_line(exc, 300)}"


def _step(device: torch.device, emulated: bool) -> tuple[str, str]:
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 16)).to(device)
    x = torch.randn(32, 32, device=device)
    y = torch.randint(0, 16, (32,), device=device)
    losses = {}
    for mode in ("bf16", "fp8"):
        model = copy.deepcopy(base)
        mp = MixedPrecision(mode, device)
        model = mp.prepare(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        w0 = model[2].weight.detach().clone()
        with mp.autocast():
            loss = F.cross_entropy(model(x), y)
        mp.backward(loss)
        mp.step(opt, zero_grad=True)
        losses[mode] = float(loss.detach())  # host-device sync: fine in a self-test
        if mode == "fp8":
            converted = [d["name"] for d in mp.fp8_layers if d["converted"]]
            if type(model[2]).__name__ != "Float8Linear" or converted != ["2"]:
                return "fail", f"the engine converted {converted or 'no layer'}, expected the middle Linear '2'"
            if torch.equal(w0, model[2].weight):
                return "fail", "the fp8 optimizer step did not change the converted layer's weights"
            bad = [str(p.dtype) for p in model.parameters() if p.dtype != torch.float32]
            if bad:
                return "fail", f"master weights are not float32 after an fp8 step: {bad}"
    l8 = losses["fp8"]
    gap, why = fp8_loss_gap(l8, losses["bf16"])
    if why:
        return "fail", why
    how = "emulated by torchao, no fp8 speed here" if emulated else "torchao fp8 kernels"
    return "pass", (f"one fp8 step through the engine ({how}): middle Linear as Float8Linear, loss {l8:.4g} within "
                    f"{gap:.2%} of bf16's, weights updated, master weights float32")
