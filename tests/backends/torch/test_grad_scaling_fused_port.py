"""PyTorch's ``test_grad_scaling_autocast_fused_optimizers`` (pytorch/pytorch ``test/test_optim.py``,
formerly ``test/test_torch.py``) through ``ampkit.MixedPrecision``, paraphrased for the CPU.

Upstream: a fused Adam/AdamW (amsgrad off and on) stepped by a GradScaler against the same optimizer
unfused, also stepped by a GradScaler; with ``separate_unscale`` the scaled run calls
``scaler.unscale_(opt)`` before ``step`` (so the fused kernel gets no ``grad_scale``). After every
step the losses, the gradients, the parameters and the optimizer state agree. Here the scaled run is
the engine: ``mp.step(opt)`` leaves the unscale to the fused kernel, and
``mp.step(opt, max_grad_norm=float("inf"))`` unscales separately -- the way a torch user measures the
gradient norm without clipping (``clip_grad_norm_(params, inf)``), which the engine refused before
issue #49. The norm it returns is checked against the control's unscaled gradients.
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn as nn

from ampkit.backends.torch.engine import MixedPrecision

CASES = list(itertools.product((torch.optim.Adam, torch.optim.AdamW), (False, True), (False, True)))
LOOSE = {"atol": 2e-5, "rtol": 2e-5}  # upstream's tolerance for params and exp_avg_sq with float betas


def _case(opt_ctor, amsgrad):
    torch.manual_seed(20)
    control = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    scaling = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    scaling.load_state_dict(control.state_dict())
    g = torch.Generator().manual_seed(3)
    batches = [(torch.randn(8, 8, generator=g), torch.randn(8, 8, generator=g)) for _ in range(4)]
    opt_c = opt_ctor(control.parameters(), lr=1.0, amsgrad=amsgrad, fused=False)
    opt_s = opt_ctor(scaling.parameters(), lr=1.0, amsgrad=amsgrad, fused=True)
    return control, scaling, opt_c, opt_s, batches


@pytest.mark.parametrize("opt_ctor, amsgrad, separate_unscale", CASES,
                         ids=[f"{c.__name__}-amsgrad={a}-separate_unscale={s}" for c, a, s in CASES])
def test_grad_scaling_autocast_fused_optimizers(opt_ctor, amsgrad, separate_unscale):
    control, scaling, opt_c, opt_s, batches = _case(opt_ctor, amsgrad)
    assert opt_s._step_supports_amp_scaling and not getattr(opt_c, "_step_supports_amp_scaling", False)
    scaler_c = torch.amp.GradScaler("cpu", init_scale=128.0)
    mp = MixedPrecision("fp16", "cpu", init_scale=128.0)
    for x, y in batches:
        opt_c.zero_grad()
        with torch.autocast("cpu", dtype=torch.half):
            loss_c = nn.functional.mse_loss(control(x), y)
        scaler_c.scale(loss_c).backward()
        scaler_c.step(opt_c)
        scaler_c.update()

        opt_s.zero_grad()
        with mp.autocast():
            loss_s = nn.functional.mse_loss(scaling(x), y)
        mp.backward(loss_s)
        r = mp.step(opt_s, max_grad_norm=float("inf")) if separate_unscale else mp.step(opt_s)

        torch.testing.assert_close(loss_s, loss_c)
        assert r.scale == scaler_c.get_scale() and not r.skipped
        if separate_unscale:  # the unscaled norm, measured, nothing clipped
            want = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in control.parameters()]))
            assert float(r.grad_norm) == pytest.approx(float(want), rel=1e-5)
        else:
            assert r.grad_norm is None
        for pc, ps in zip(control.parameters(), scaling.parameters()):
            torch.testing.assert_close(ps.grad, pc.grad)
            torch.testing.assert_close(ps, pc, **LOOSE)
            state_c, state_s = opt_c.state[pc], opt_s.state[ps]
            for k in state_c:
                actual = state_s[k].squeeze() if k == "step" else state_s[k]
                torch.testing.assert_close(actual, state_c[k], **(LOOSE if k in ("exp_avg_sq", "max_exp_avg_sq") else {}))
    assert mp.stats["steps"] == 4 and mp.health()["status"] == "ok"
