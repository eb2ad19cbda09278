"""Parameter gradients in the audit: the gradients GradScaler checks, against real GradScaler steps.

One Linear fed inputs of ~300 at batch 256: its weight gradient (a sum over the batch) overflows fp16
at GradScaler's 65536 while every activation and every gradient w.r.t. an output is finite. Its loss
times 1e5 (a summed loss, say) overflows at every scale >= 1: GradScaler backs off below 1 (issue #50).
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn

import ampkit
from ampkit.audit import driver


def model():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 10))
    with torch.no_grad():
        m[0].weight.mul_(0.01)  # moderate logits: the gradients w.r.t. the output do not underflow
    return m


def batch():
    g = torch.Generator().manual_seed(0)
    return torch.randn(256, 16, generator=g) * 300, torch.randint(0, 10, (256,), generator=g)


def scaled_loss(factor: float):
    def loss(out, y):
        return nn.functional.cross_entropy(out.float(), y) * factor

    return loss


def real_step_skips(scale: float, factor: float = 1.0) -> bool:
    """One real torch.amp.GradScaler step at ``scale`` on the same model and batch: skipped?"""
    m, (x, y) = model(), batch()
    opt = torch.optim.SGD(m.parameters(), lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=scale)
    with torch.autocast("cpu", dtype=torch.float16):
        loss = scaled_loss(factor)(m(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    return scaler.get_scale() < scale


def gradscaler_start(factor: float = 1.0) -> tuple[int, float]:
    """A default run's start on this batch, run for real: one GradScaler with its defaults (65536, halving on
    each skip), stepping until a step is taken; the steps it skipped and the scale it trains at."""
    m, (x, y) = model(), batch()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    for skips in range(64):
        scale = scaler.get_scale()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = scaled_loss(factor)(m(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if scaler.get_scale() >= scale:
            return skips, scale
    raise AssertionError("GradScaler still skipping after 64 steps")


@pytest.fixture(scope="module")
def real():
    """A default run's start on this batch: GradScaler from 65536, halving on each skip."""
    assert gradscaler_start() == (5, 2048.0)  # the measurement the audit must agree with
    return 5, 2048.0


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


def test_the_back_off_follows_gradscaler_below_1_computed_not_stepped(monkeypatch):
    """Loss x1e5: the weight gradient (30.2 in float32 at x1) reaches 3.02e6, so only 2**-6 of it fits fp16. A real
    GradScaler skips 22 steps and trains at 0.015625; the audit reports the same skips, scale and suggested
    scale, and measures three passes for it (65536, then the predicted 2**-5 and 2**-6): the scales are powers
    of the backoff factor, the one that fits computed from the float32 gradient, not stepped down to."""
    assert gradscaler_start(1e5) == (22, 0.015625)  # what a real GradScaler does on this model and batch
    measured = []
    real_back_off = driver.back_off

    def counting(session, step, s, outcome, max_finite, say=lambda s, o: None):
        return real_back_off(session, step, s, outcome, max_finite, lambda s, o: (measured.append(s), say(s, o)))

    monkeypatch.setattr(driver, "back_off", counting)
    with warnings.catch_warnings():  # the audit's own engine at 0.015625 raises no alarm at the user: the report says it
        warnings.simplefilter("error", ampkit.LossScaleWarning)
        rep = ampkit.audit(model(), batch(), scaled_loss(1e5), mode="fp16", device="cpu")
    assert (rep.skipped_steps, rep.loss_scale, rep.suggested_loss_scale, rep.initial_loss_scale) == (22, 0.015625, 0.015625,
                                                                                                     65536.0)
    assert measured == [0.03125, 0.015625]  # the scale above skips (so the scaler comes down), the one found fits
    assert real_step_skips(0.03125, 1e5) and not real_step_skips(0.015625, 1e5)
    assert rep.first_nonfinite is None and all(lay.fwd_nonfinite == 0 for lay in rep.layers)
    assert "skips its first 22 step(s)" in rep.note and "trains at 0.015625" in rep.note and "forward" not in rep.note
    doc = rep.to_dict()
    assert (doc["suggested_loss_scale"], doc["loss_scale"], doc["skipped_steps"]) == (0.015625, 0.015625, 22)
    assert not [f for f in rep.findings if f.kind in ("nonfinite", "overflow")]  # the back-off cured it: nothing to find


def test_a_gradient_overflow_below_1_is_never_called_a_forward_one():
    """The same loss x1e5 at a fixed scale 1: every activation is finite, the weight gradient alone overflows. The
    first inf/NaN is the backward's, and no finding or note speaks of the forward (issue #50)."""
    rep = ampkit.audit(model(), batch(), scaled_loss(1e5), mode="fp16", loss_scale=1.0, device="cpu")
    assert rep.first_nonfinite == {"name": "0", "phase": "backward", "param": "0.weight", "step": 0, "op": None,
                                   "in_reference": False}
    assert all(lay.fwd_nonfinite == 0 for lay in rep.layers)
    assert {f.kind for f in rep.findings} == {"nonfinite", "overflow"}
    assert not [f.advice for f in rep.findings if "forward" in f.advice] and "forward" not in (rep.note or "")
    assert "appears in the backward of 0 at loss scale 1" in next(f.advice for f in rep.findings if f.kind == "nonfinite")
    assert rep.suggested_loss_scale == 0.00390625 and real_step_skips(1.0, 1e5) and not real_step_skips(0.00390625, 1e5)
