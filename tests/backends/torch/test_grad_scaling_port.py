"""PyTorch's own GradScaler tests (``test_grad_scaling_*`` in pytorch/pytorch ``test/test_torch.py``,
device-generic, and ``test/test_cuda.py``), paraphrased for the CPU and run through
``ampkit.MixedPrecision`` the way a user would (issue #22). Each test names its upstream function.

Upstream's harness (``_run_scaling_case`` / ``_create_scaling_models_optimizers``): two identical
``Sequential(Linear(8, 8), Linear(8, 8))`` models, SGD lr=1.0, four batches of 8x8, MSE loss; one runs
with the scaler, the other without; at ``skip_iter`` the scaled run's ``model[1].weight.grad`` is
filled with inf and the control run skips that step; afterwards the scale is
``128 * growth**unskipped * backoff**skipped`` and the two models agree. Here the scaled run is the
engine, and ``StepResult.scale == stats["scale"] == get_scale()`` is checked after every step.
"""

from __future__ import annotations

import pickle
import random

import pytest
import torch
import torch.nn as nn

from ampkit.backends.torch.engine import MixedPrecision

INF = float("inf")
NAN = float("nan")
SKIP_ITER = 2


def models_and_optimizers(opt_ctor=torch.optim.SGD, **opt_kw):
    torch.manual_seed(0)
    control = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    scaling = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    scaling.load_state_dict(control.state_dict())
    kw = {"lr": 1.0, **opt_kw}
    return control, scaling, opt_ctor(control.parameters(), **kw), opt_ctor(scaling.parameters(), **kw)


def data(n=4):
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(8, 8, generator=g), torch.randn(8, 8, generator=g)) for _ in range(n)]


def mirror_exact(mp, result):
    assert result.scale == mp.stats["scale"] == mp.get_scale()


def run_scaling_case(engine_run, control_run, unskipped, skipped, atol=1e-7, engine_kw=None, **opt):
    """Upstream ``_run_scaling_case``: the engine's run against a plain fp32 control run."""
    control, scaling, opt_c, opt_s = models_and_optimizers(**opt)
    mp = MixedPrecision("fp16", "cpu", init_scale=128.0, growth_factor=2.0, growth_interval=1, **(engine_kw or {}))
    control_run(control, opt_c)
    mp = engine_run(scaling, opt_s, mp)
    assert mp.get_scale() == 128.0 * 2.0**unskipped * 0.5**skipped
    for c, s in zip(control.parameters(), scaling.parameters()):
        torch.testing.assert_close(c, s, rtol=1e-5, atol=atol)
    return mp


def plain_control(model, opt, data_=None, skip=SKIP_ITER):
    for i, (x, y) in enumerate(data_ or data()):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        if i != skip:
            opt.step()


def inject_inf(model):
    with torch.no_grad():
        model[1].weight.grad.fill_(INF)


# ---------------------------------------------------------------- upstream test_grad_scaling_update_scale
def test_grad_scaling_update_scale():
    """Upstream (kernel level): growth 2, backoff 0.25, interval 2; two clean steps double the scale
    of 4, one inf step quarters it. Here through the engine, one parameter."""
    p = nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=0.0)
    mp = MixedPrecision("fp16", "cpu", init_scale=4.0, growth_factor=2.0, backoff_factor=0.25, growth_interval=2)
    scales = []
    for mult in (1.0, 1.0, INF):
        mp.backward(p.sum() * mult)
        r = mp.step(opt, zero_grad=True)
        mirror_exact(mp, r)
        scales.append(r.scale)
    assert scales == [4.0, 8.0, 2.0]


# ---------------------------------------------------------------- upstream test_grad_scaling_autocast (+ pickle)
@pytest.mark.parametrize("impl", ["for-loop", "foreach", "fused"])
def test_grad_scaling_autocast(impl):
    """Upstream runs autocast+GradScaler against an fp32 control and pickles the scaler after every
    step (``try_pickle``), for for-loop, foreach and fused optimizers. Here the engine itself is pickled
    and unpickled after every step and the run goes on with the copy."""
    opt_kw = {"foreach": impl == "foreach", "fused": True} if impl == "fused" else {"foreach": impl == "foreach"}
    if impl == "fused":
        opt_kw.pop("foreach")

    def engine_run(model, opt, mp):
        for i, (x, y) in enumerate(data()):
            with mp.autocast():
                loss = nn.functional.mse_loss(model(x), y)
            mp.backward(loss)
            if i == SKIP_ITER:
                inject_inf(model)
            r = mp.step(opt, zero_grad=True)
            mirror_exact(mp, r)
            assert r.skipped == (i == SKIP_ITER)
            mp = pickle.loads(pickle.dumps(mp))
            mirror_exact(mp, r)
        return mp

    run_scaling_case(engine_run, plain_control, unskipped=3, skipped=1, atol=1e-3, **opt_kw)


# ---------------------------------------------------------------- upstream test_grad_scaling_clipping(_separate_unscale)
def test_grad_scaling_clipping_separate_unscale():
    """Upstream: ``scaler.unscale_(opt)`` then ``clip_grad_norm_(max_norm=0.2)`` equals clipping the
    fp32 control; the engine does both in ``step(max_grad_norm=)``. (Upstream's
    ``test_grad_scaling_clipping`` clips the scaled gradients to ``max_norm * scale`` instead: the same
    result, which this covers too.)"""
    max_norm = 0.2

    def control_run(model, opt):
        for i, (x, y) in enumerate(data()):
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            if i != SKIP_ITER:
                opt.step()

    def engine_run(model, opt, mp):
        for i, (x, y) in enumerate(data()):
            mp.backward(nn.functional.mse_loss(model(x), y))
            if i == SKIP_ITER:
                inject_inf(model)
            r = mp.step(opt, max_grad_norm=max_norm, zero_grad=True)
            mirror_exact(mp, r)
            assert r.skipped == (i == SKIP_ITER)
        return mp

    run_scaling_case(engine_run, control_run, unskipped=3, skipped=1, atol=1e-5)


# ---------------------------------------------------------------- upstream test_grad_scaling_penalty
def test_grad_scaling_penalty():
    """Upstream: a gradient penalty computed from ``autograd.grad`` of the *scaled* loss, unscaled by
    hand (``1 / scaler.get_scale()``), added to the loss. Here with the engine's scaler and scale."""

    def penalised(model, loss, scale):
        params = list(model.parameters())
        grads = torch.autograd.grad(loss * scale, params, create_graph=True)
        grads = [g / scale for g in grads]
        return loss + sum(g.pow(2).sum() for g in grads).sqrt()

    def control_run(model, opt):
        for i, (x, y) in enumerate(data()):
            opt.zero_grad()
            penalised(model, nn.functional.mse_loss(model(x), y), 1.0).backward()
            if i != SKIP_ITER:
                opt.step()

    def engine_run(model, opt, mp):
        for i, (x, y) in enumerate(data()):
            loss = nn.functional.mse_loss(model(x), y)
            mp.backward(penalised(model, loss, mp.stats["scale"]))
            if i == SKIP_ITER:
                inject_inf(model)
            r = mp.step(opt, zero_grad=True)
            mirror_exact(mp, r)
        return mp

    run_scaling_case(engine_run, control_run, unskipped=3, skipped=1, atol=1e-5)


# ---------------------------------------------------------------- upstream test_grad_scaling_accumulation
def test_grad_scaling_accumulation():
    """Upstream: two micro-batches per step, loss / 2, the scaler stepped every second batch."""
    batches = data(8)

    def control_run(model, opt):
        for i, (x, y) in enumerate(batches):
            (nn.functional.mse_loss(model(x), y) / 2).backward()
            if i % 2 == 1:
                opt.step()
                opt.zero_grad()

    def engine_run(model, opt, mp):
        for i, (x, y) in enumerate(batches):
            mp.backward(nn.functional.mse_loss(model(x), y))
            if i % 2 == 1:
                r = mp.step(opt, zero_grad=True)
                mirror_exact(mp, r)
                assert not r.skipped
        return mp

    run_scaling_case(engine_run, control_run, unskipped=4, skipped=0, atol=1e-6,
                     engine_kw={"accumulation_steps": 2})


# ---------------------------------------------------------------- upstream test_grad_scaling_multiple
def test_grad_scaling_multiple():
    """Upstream: two models, two optimizers, two losses that mix both models' outputs, one scaler.
    An inf in model 1's gradients skips optimizer 1 only (GradScaler decides per optimizer: optimizer 0
    still steps) and backs the one scale off once. Through the engine: ``mp.step([opt0, opt1])``, whose
    ``skipped`` says that a step was skipped."""
    c0, s0, oc0, os0 = models_and_optimizers()
    c1, s1, oc1, os1 = models_and_optimizers()
    with torch.no_grad():
        for m in (c1, s1):
            for p in m.parameters():
                p.mul_(0.5)  # the second model differs from the first

    def losses(m0, m1, x, y):
        out0, out1 = m0(x), m1(x)
        return (nn.functional.mse_loss(0.3 * out0 + 0.7 * out1, y), nn.functional.mse_loss(0.6 * out0 - 0.4 * out1, y))

    mp = MixedPrecision("fp16", "cpu", init_scale=128.0, growth_factor=2.0, growth_interval=1)
    for i, (x, y) in enumerate(data()):
        oc0.zero_grad()
        oc1.zero_grad()
        loss0, loss1 = losses(c0, c1, x, y)
        loss0.backward(retain_graph=True)
        loss1.backward()
        oc0.step()
        if i != SKIP_ITER:
            oc1.step()
        loss0, loss1 = losses(s0, s1, x, y)
        mp.backward(loss0, retain_graph=True)
        mp.backward(loss1)
        if i == SKIP_ITER:
            inject_inf(s1)
        r = mp.step([os0, os1], zero_grad=True)
        mirror_exact(mp, r)
        assert r.skipped == (i == SKIP_ITER)
    assert mp.get_scale() == 128.0 * 2.0**3 * 0.5
    for c, s in zip(list(c0.parameters()) + list(c1.parameters()), list(s0.parameters()) + list(s1.parameters())):
        torch.testing.assert_close(c, s, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- upstream test_grad_scaling_state_dict
def test_grad_scaling_state_dict():
    """Upstream: a scaler (3, 4, .5, 2) loads into one made with (6, 7, .8, 1) and takes every value,
    then updates with the loaded factors. Here engine into engine, mirror included, and the update
    after the load uses the loaded factors bit for bit."""
    p = nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=0.0)
    s0 = MixedPrecision("fp16", "cpu", init_scale=3.0, growth_factor=4.0, backoff_factor=0.5, growth_interval=2)
    s1 = MixedPrecision("fp16", "cpu", init_scale=6.0, growth_factor=7.0, backoff_factor=0.8, growth_interval=1)
    s1.load_state_dict(s0.state_dict())
    sd = s1.scaler.state_dict()
    assert (sd["scale"], sd["growth_factor"], sd["backoff_factor"], sd["growth_interval"], sd["_growth_tracker"]) == \
        (3.0, 4.0, 0.5, 2, 0)
    assert s1.stats["scale"] == s1.get_scale() == 3.0
    for mult, want in ((1.0, 3.0), (1.0, 12.0), (INF, 6.0)):
        s1.backward(p.sum() * mult)
        r = s1.step(opt, zero_grad=True)
        mirror_exact(s1, r)
        assert r.scale == want


# ---------------------------------------------------------------- upstream test_grad_scale_will_not_overflow
def test_grad_scale_will_not_overflow():
    """Upstream: ``GradScaler(growth_interval=1, growth_factor=2**4, init_scale=1e38)`` never grows the
    scale to inf. Here a clean step at 1e38 keeps it (the product is not finite), exactly."""
    p = nn.Parameter(torch.full((2,), 1e-30))
    opt = torch.optim.SGD([p], lr=0.0)
    mp = MixedPrecision("fp16", "cpu", init_scale=1e38, growth_factor=2.0**4, growth_interval=1)
    mp.backward(p.sum())
    r = mp.step(opt)
    mirror_exact(mp, r)
    assert not r.skipped and r.scale == mp.get_scale() == torch.tensor(1e38).item()


# ---------------------------------------------------------------- upstream test_grad_scaling_unscale_sparse
def test_grad_scaling_unscale_sparse():
    """Upstream checks the unscale kernel on sparse gradients (an inf among them is found). Here an
    ``Embedding(sparse=True)`` trained through the engine: an inf in the sparse gradient skips the step."""
    torch.manual_seed(0)
    emb = nn.Embedding(10, 4, sparse=True)
    opt = torch.optim.SGD(emb.parameters(), lr=0.1)
    mp = MixedPrecision("fp16", "cpu", init_scale=8.0, growth_interval=1)
    idx = torch.tensor([1, 3, 3])
    for mult, skipped in ((1.0, False), (INF, True), (1.0, False)):
        w = emb.weight.detach().clone()
        mp.backward(emb(idx).sum() * mult)
        assert emb.weight.grad.is_sparse
        r = mp.step(opt, zero_grad=True)
        mirror_exact(mp, r)
        assert r.skipped is skipped and torch.equal(w, emb.weight) == skipped


# ---------------------------------------------------------------- the sequences against a raw GradScaler
FACTORS = [(3.0, 0.3), (1.5, 0.7), (2.0, 0.1)]


@pytest.mark.filterwarnings("ignore::ampkit.LossScaleWarning")  # random runs collapse now and then
@pytest.mark.parametrize("growth,backoff", FACTORS, ids=[f"{g}/{b}" for g, b in FACTORS])
def test_random_clean_inf_nan_sequences_match_a_raw_gradscaler_step_by_step(growth, backoff):
    """Long random clean/inf/NaN sequences, intervals 1-5, from a scale near float32's top (so the
    growth hits the non-finite guard) and from an ordinary one: the engine's mirror equals
    ``get_scale()`` and the raw GradScaler's scale after every step, and the skips agree."""
    rng = random.Random(f"{growth}/{backoff}")
    x = torch.tensor([1.0, -2.0, 0.5])
    for interval in range(1, 6):
        for init in (2.0**120, 1024.0):
            p, q = nn.Parameter(torch.ones(3)), nn.Parameter(torch.ones(3))
            opt_p, opt_q = torch.optim.SGD([p], lr=1e-3), torch.optim.SGD([q], lr=1e-3)
            kw = dict(init_scale=init, growth_factor=growth, backoff_factor=backoff, growth_interval=interval)
            mp, raw = MixedPrecision("fp16", "cpu", **kw), torch.amp.GradScaler("cpu", **kw)
            for step in range(60):
                mult = rng.choice([1.0, 1.0, 1.0, INF, NAN])
                mp.backward((p * x).sum() * mult)
                r = mp.step(opt_p, zero_grad=True)
                q_before = q.detach().clone()
                raw.scale((q * x).sum() * mult).backward()
                raw.step(opt_q)
                raw.update()
                opt_q.zero_grad()
                where = f"interval {interval}, init {init}, step {step}"
                assert r.scale == mp.stats["scale"] == mp.get_scale() == raw.get_scale(), where
                assert r.skipped == torch.equal(q_before, q), where


def test_set_growth_factor_on_the_engines_scaler_is_followed():
    """The mirror reads the factors from the scaler at each update: ``mp.scaler.set_growth_factor`` and
    ``set_backoff_factor`` between steps keep it exact."""
    p = nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=0.0)
    mp = MixedPrecision("fp16", "cpu", init_scale=1000.0, growth_interval=1)
    mp.scaler.set_growth_factor(1.1)
    mp.scaler.set_backoff_factor(0.3)
    for mult in (1.0, INF, 1.0, INF, INF, 1.0):
        mp.backward(p.sum() * mult)
        mirror_exact(mp, mp.step(opt, zero_grad=True))
    assert mp.stats["scale"] != 1000.0
