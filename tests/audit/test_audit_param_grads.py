"""Parameter gradients in the audit: the gradients GradScaler checks, against real GradScaler steps.

One Linear fed inputs of ~300 at batch 256: its weight gradient (a sum over the batch) overflows fp16
at GradScaler's 65536 while every activation and every gradient w.r.t. an output is finite.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import ampkit


def model():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 10))
    with torch.no_grad():
        m[0].weight.mul_(0.01)  # moderate logits: the gradients w.r.t. the output do not underflow
    return m


def batch():
    g = torch.Generator().manual_seed(0)
    return torch.randn(256, 16, generator=g) * 300, torch.randint(0, 10, (256,), generator=g)


def real_step_skips(scale: float) -> bool:
    """One real torch.amp.GradScaler step at ``scale`` on the same model and batch: skipped?"""
    m, (x, y) = model(), batch()
    opt = torch.optim.SGD(m.parameters(), lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=scale)
    with torch.autocast("cpu", dtype=torch.float16):
        loss = nn.functional.cross_entropy(m(x).float(), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    return scaler.get_scale() < scale


@pytest.fixture(scope="module")
def real():
    """A default run's start on this batch: GradScaler from 65536, halving on each skip."""
    scale, skips = 65536.0, 0
    while real_step_skips(scale):
        scale, skips = scale / 2, skips + 1
    assert skips == 5 and scale == 2048.0  # the measurement the audit must agree with
    return skips, scale


def test_the_audit_skips_as_gradscaler_does_and_names_the_parameter(real):
    rep = ampkit.audit(model(), batch(), mode="fp16", device="cpu")
    lay = {lay.name: lay for lay in rep.layers}["0"]
    assert all(x.fwd_nonfinite == 0 and x.grad_nonfinite == 0 for x in rep.layers)  # activations finite
    assert (rep.skipped_steps, rep.loss_scale) == real and rep.initial_loss_scale == 65536.0
    assert lay.param_grad_overflow == {"params": ["0.weight"], "loss_scale": 65536.0}
    assert lay.param_grad_amax == pytest.approx(30.2, rel=0.01) and lay.param_grad_nonfinite == 0
    assert "the gradient of 0.weight of Linear 0" in rep.note and "skips its first 5 step(s)" in rep.note
    # one number everywhere: what it trains at is what it suggests, and a real step there does not skip
    assert rep.suggested_loss_scale == rep.loss_scale and not real_step_skips(rep.suggested_loss_scale)
    assert rep.to_dict()["layers"][0]["param_grad_overflow"]["params"] == ["0.weight"]


def test_at_a_fixed_scale_the_overflow_is_a_finding_with_a_scale_that_really_fits():
    rep = ampkit.audit(model(), batch(), mode="fp16", loss_scale=65536.0, device="cpu")
    assert rep.first_nonfinite == {"name": "0", "phase": "backward", "param": "0.weight", "step": 0, "op": None,
                                   "in_reference": False}
    (over,) = [f for f in rep.findings if f.kind == "overflow"]
    assert over.layer == "0" and "the gradient of 0.weight (Linear 0's parameter)" in over.advice
    fit = rep.suggested_loss_scale
    assert fit == 512.0 and f"init_scale={fit:g} or lower avoids it" in over.advice
    assert over.code == f"scaler = torch.amp.GradScaler('cpu', init_scale={fit:g})"
    assert {lay.name: lay for lay in rep.layers}["0"].param_grad_nonfinite > 0
    assert real_step_skips(65536.0) and not real_step_skips(fit)
    assert not any("init_scale=16" in f.advice for f in rep.findings)


def test_the_what_if_range_ends_where_gradscaler_stops_skipping(real):
    rep = ampkit.audit(model(), batch(), what_if=True, formats=["fp16"], device="cpu", steps=1)
    fp16 = rep.what_if["fp16"]
    assert fp16["loss_scale_range"][1] == real[1]  # 2 * 2048 overflows fc.weight's gradient: a real skip
    row = fp16["modules"][0]
    assert row["param_grad_amax"] == pytest.approx(30.2, rel=0.01) and row["param_grad_overflow"]
