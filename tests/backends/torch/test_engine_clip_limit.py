"""Issue #40, after the first round: ``mp.step(opt, max_grad_norm=TENSOR)`` is validated too, never
with a host-device sync per step (:mod:`ampkit.backends.torch.engine.clip_limit`): a CPU tensor is
read and checked like a number; an accelerator's tensor is folded into the clip so that a NaN, inf
or <= 0 limit clips nothing, and ``health()`` says in how many steps (before: a NaN tensor made every
weight NaN while health() said ok)."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
import torch.nn as nn

import ampkit
from ampkit.backends.torch.engine import clip_limit
from ampkit.errors import UsageError

X = torch.tensor([[1.0, -2.0, 3.0, 0.5], [0.0, 1.0, -1.0, 2.0]])
Y = torch.tensor([0, 2])


def _stepped(mode="bf16"):
    torch.manual_seed(0)
    mp = ampkit.MixedPrecision(mode, "cpu", **({"init_scale": 2.0} if mode == "fp16" else {}))  # no overflow skip
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    with mp.autocast():
        loss = nn.functional.cross_entropy(model(X), Y)
    mp.backward(loss)
    return mp, model, opt


def _weights_after(norm, mode="bf16"):
    mp, model, opt = _stepped(mode)
    r = mp.step(opt, max_grad_norm=norm)
    return mp, r, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("norm", [torch.tensor(float("nan")), torch.tensor(float("-inf")), torch.tensor(-1.0),
                                  torch.tensor([0.0])], ids=["nan", "-inf", "negative", "zero"])
def test_a_cpu_tensor_is_checked_like_a_number(norm):
    mp, model, opt = _stepped()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(UsageError, match=r"max_grad_norm must be a number > 0"):
        mp.step(opt, max_grad_norm=norm)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters())) and mp.stats["steps"] == 0


@pytest.mark.parametrize("norm, words", [
    (torch.tensor(1), "a torch.int64 tensor of shape ()"),
    (torch.tensor([1.0, 2.0]), "a torch.float32 tensor of shape (2,)"),
], ids=["integer", "two-elements"])
def test_a_tensor_must_hold_one_floating_point_number(norm, words):
    mp, _, opt = _stepped()
    with pytest.raises(UsageError, match="max_grad_norm as a tensor must hold one floating-point number") as err:
        mp.step(opt, max_grad_norm=norm)
    assert words in str(err.value)


def test_a_good_tensor_clips_exactly_as_the_number():
    _, r_num, w_num = _weights_after(1e-3)
    _, r_ten, w_ten = _weights_after(torch.tensor(1e-3))
    assert all(torch.equal(a, b) for a, b in zip(w_num, w_ten))
    assert float(r_num.grad_norm) == float(r_ten.grad_norm)


@pytest.mark.parametrize("mode", ["bf16", "fp16"])
def test_an_accelerator_tensor_that_is_not_a_number_above_0_clips_nothing_and_health_says_so(monkeypatch, mode):
    """The accelerator's branch, run on CPU tensors (on_host answers False): never read in step()."""
    monkeypatch.setattr(clip_limit, "on_host", lambda t: False)
    _, _, unclipped = _weights_after(1e6, mode)  # a limit far above the norm: no clipping
    _, _, clipped = _weights_after(1e-3, mode)
    assert not all(torch.equal(a, b) for a, b in zip(unclipped, clipped))
    mp, model, opt = _stepped(mode)
    r = mp.step(opt, max_grad_norm=torch.tensor(float("nan")))
    after = [p.detach().clone() for p in model.parameters()]
    assert all(torch.isfinite(p).all() for p in after)
    assert all(torch.equal(a, b) for a, b in zip(after, unclipped))  # as if not clipped: never NaN, never reversed
    assert r.grad_norm is not None and float(r.grad_norm) > 0
    health = mp.health()
    assert health["status"] == "warning"
    assert "max_grad_norm was NaN or <= 0 in 1 step(s): those steps were not clipped" in health["messages"][-1]
    # a good tensor in the next step clips as the number does, and the count stays with the engine's copies
    mp.step(opt, max_grad_norm=torch.tensor(-2.0))
    mp.step(opt, max_grad_norm=torch.tensor(1e-3))
    for engine in (mp, copy.deepcopy(mp), pickle.loads(pickle.dumps(mp))):
        assert "in 2 step(s)" in engine.health()["messages"][-1]


def test_health_is_ok_after_good_tensor_limits(monkeypatch):
    monkeypatch.setattr(clip_limit, "on_host", lambda t: False)
    mp, _, _ = _weights_after(torch.tensor(1e-3))
    assert mp.health()["status"] == "ok" and mp.health()["messages"] == []


@pytest.mark.gpu
def test_a_cuda_tensor_limit_costs_no_sync_and_a_nan_one_clips_nothing():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    torch.manual_seed(0)
    mp = ampkit.MixedPrecision("bf16", "cuda")
    model = nn.Linear(4, 3).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    with mp.autocast():
        loss = nn.functional.cross_entropy(model(X.cuda()), Y.cuda())
    mp.backward(loss)
    limit = torch.tensor(float("nan"), device="cuda")
    torch.cuda.set_sync_debug_mode("error")  # any host-device sync in step() raises
    try:
        mp.step(opt, max_grad_norm=limit)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert "in 1 step(s)" in mp.health()["messages"][-1]


@pytest.mark.parametrize("norm", [float("inf"), torch.tensor(float("inf"))], ids=["number", "cpu-tensor"])
@pytest.mark.parametrize("mode", ["bf16", "fp16"])
def test_inf_measures_the_norm_and_clips_nothing_as_torch_does(norm, mode):
    """Issue #49: ``clip_grad_norm_(params, inf)`` is how torch users measure the norm; the engine
    took it as a bad limit. The norm returned is the unscaled one, the weights as without clipping."""
    mp, r, clipped_not = _weights_after(norm, mode)
    _, _, unclipped = _weights_after(None, mode)
    _, r_tiny, tiny = _weights_after(1e-3, mode)
    assert all(torch.equal(a, b) for a, b in zip(clipped_not, unclipped))
    assert not all(torch.equal(a, b) for a, b in zip(clipped_not, tiny))  # the case can tell a clip
    assert float(r.grad_norm) == pytest.approx(float(r_tiny.grad_norm)) and float(r.grad_norm) > 1e-3
    assert mp.health()["status"] == "ok" and mp.stats["steps"] == 1


def test_an_inf_accelerator_tensor_clips_nothing_and_is_not_counted(monkeypatch):
    monkeypatch.setattr(clip_limit, "on_host", lambda t: False)
    mp, r, w = _weights_after(torch.tensor(float("inf")))
    _, _, unclipped = _weights_after(None)
    assert all(torch.equal(a, b) for a, b in zip(w, unclipped)) and float(r.grad_norm) > 0
    assert mp.health() == {**mp.health(), "status": "ok", "messages": []}
