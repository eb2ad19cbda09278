"""The engine tells the truth with every optimizer implementation torch has (issue #10).

Each case runs the same fp16 training twice on CPU: a hand-written ``torch.amp.GradScaler`` loop
(the reference, its skips learned independently from the scale going down) and
``ampkit.MixedPrecision``; skips, scales, learning rates and final weights must be identical.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
import torch.nn as nn

from ampkit.backends.torch.engine import MixedPrecision

INF, NAN = float("inf"), float("nan")
# growth every 3 clean steps, backoff on inf (step 2) and on NaN (step 6): 1024 -> 512 -> 1024 -> 512 -> 1024
INJECT = {2: INF, 6: NAN}
STEPS = 10
KW = dict(init_scale=1024.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=3)
EXPECTED_SCALES = [1024.0, 1024.0, 512.0, 512.0, 512.0, 1024.0, 512.0, 512.0, 512.0, 1024.0]

OPTIMIZERS = {
    "SGD": (torch.optim.SGD, dict(lr=0.05, momentum=0.9)),
    "Adam": (torch.optim.Adam, dict(lr=1e-2)),
    "AdamW": (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1)),
}
IMPLS = {"for-loop": dict(foreach=False), "foreach": dict(foreach=True), "fused": dict(fused=True)}


def tiny_model(seed=0, device="cpu"):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to(device)


def batches(n, seed=1, bs=6, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(bs, 8, generator=g).to(device), torch.randint(0, 4, (bs,), generator=g).to(device))
            for _ in range(n)]


def make(name, impl, params, extra=None):
    cls, kw = OPTIMIZERS[name]
    opt = cls(params, **kw, **IMPLS[impl], **(extra or {}))
    return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)


def hand_loop(name, impl, clip, device="cpu", extra=None):
    model = tiny_model(device=device)
    opt, sched = make(name, impl, model.parameters(), extra)
    scaler = torch.amp.GradScaler(device, **KW)
    skipped, scales, lrs = [], [], []
    for i, (x, y) in enumerate(batches(STEPS, device=device)):
        with torch.autocast(device, dtype=torch.float16):
            loss = nn.functional.cross_entropy(model(x), y) * INJECT.get(i, 1.0)
        scaler.scale(loss).backward()
        if clip is not None:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        before = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        skip = scaler.get_scale() < before  # Accelerate's test: the scale backed off
        if not skip:
            sched.step()
        opt.zero_grad(set_to_none=True)
        skipped.append(skip)
        scales.append(scaler.get_scale())
        lrs.append(opt.param_groups[0]["lr"])
    return model, skipped, scales, lrs


def engine_loop(name, impl, clip, device="cpu", extra=None):
    model = tiny_model(device=device)
    opt, sched = make(name, impl, model.parameters(), extra)
    mp = MixedPrecision("fp16", device, **KW)
    skipped, scales, lrs = [], [], []
    for i, (x, y) in enumerate(batches(STEPS, device=device)):
        with mp.autocast():
            loss = nn.functional.cross_entropy(model(x), y) * INJECT.get(i, 1.0)
        mp.backward(loss)
        r = mp.step(opt, sched, max_grad_norm=clip, zero_grad=True)
        assert r.scale == mp.get_scale(), f"step {i}: StepResult.scale {r.scale} != get_scale() {mp.get_scale()}"
        assert mp.stats["scale"] == r.scale
        skipped.append(r.skipped)
        scales.append(r.scale)
        lrs.append(opt.param_groups[0]["lr"])
    return model, mp, skipped, scales, lrs


@pytest.mark.parametrize("clip", [None, 1.0], ids=["noclip", "clip"])
@pytest.mark.parametrize("impl", list(IMPLS))
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_matrix_matches_a_hand_written_gradscaler_loop(name, impl, clip):
    probe = make(name, impl, tiny_model().parameters())[0]
    assert getattr(probe, "_step_supports_amp_scaling", False) == (impl == "fused")  # the case is what it says

    ref_model, ref_skipped, ref_scales, ref_lrs = hand_loop(name, impl, clip)
    model, mp, skipped, scales, lrs = engine_loop(name, impl, clip)

    assert ref_skipped == [i in INJECT for i in range(STEPS)]  # the reference itself is right
    assert skipped == ref_skipped
    assert scales == ref_scales == EXPECTED_SCALES
    assert lrs == ref_lrs  # the scheduler did not move on the two skipped steps
    assert lrs[-1] == pytest.approx(OPTIMIZERS[name][1]["lr"] * 0.9 ** (STEPS - len(INJECT)))
    for p, q in zip(model.parameters(), ref_model.parameters()):
        assert torch.equal(p, q)
    assert mp.stats == {"steps": STEPS, "skipped": len(INJECT), "scale": 1024.0, "scale_min": 512.0, "scale_max": 1024.0}


CUDA_CASES = [(name, impl, None) for name in OPTIMIZERS for impl in IMPLS] + [
    ("Adam", "for-loop", {"capturable": True}), ("Adam", "foreach", {"capturable": True}),
    ("AdamW", "for-loop", {"capturable": True}), ("AdamW", "foreach", {"capturable": True}),
    ("Adam", "fused", {"capturable": True}),
]


@pytest.mark.gpu
@pytest.mark.parametrize("name,impl,extra", CUDA_CASES,
                         ids=[f"{n}-{i}{'-capturable' if e else ''}" for n, i, e in CUDA_CASES])
def test_matrix_on_cuda_with_capturable(name, impl, extra):
    ref_model, ref_skipped, ref_scales, ref_lrs = hand_loop(name, impl, None, "cuda", extra)
    model, mp, skipped, scales, lrs = engine_loop(name, impl, None, "cuda", extra)
    assert skipped == ref_skipped == [i in INJECT for i in range(STEPS)]
    assert scales == ref_scales == EXPECTED_SCALES
    assert lrs == ref_lrs
    for p, q in zip(model.parameters(), ref_model.parameters()):
        torch.testing.assert_close(p, q)


def test_issue_10_fused_adamw_reproduction():
    """The report: fused AdamW, inf at step 2, growth_interval 3, init_scale 1024."""
    model = tiny_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    mp = MixedPrecision("fp16", "cpu", init_scale=1024.0, growth_interval=3)
    for i, (x, y) in enumerate(batches(3)):
        with mp.autocast():
            loss = nn.functional.cross_entropy(model(x), y) * (INF if i == 2 else 1.0)
        mp.backward(loss)
        w = model[0].weight.detach().clone()
        r = mp.step(opt, sched, zero_grad=True)
    assert r.skipped and r.scale == 512.0 == mp.get_scale()
    assert torch.equal(w, model[0].weight)
    assert opt.param_groups[0]["lr"] == 1e-3 * 0.25  # stepped on steps 0 and 1 only


def _mixed_hand(inf_in):
    model = tiny_model()
    fused = torch.optim.SGD(model[0].parameters(), lr=0.1, fused=True)
    loop = torch.optim.Adam(model[2].parameters(), lr=1e-2, foreach=False)
    scaler = torch.amp.GradScaler("cpu", **KW)
    scales = []
    for i, (x, y) in enumerate(batches(4)):
        with torch.autocast("cpu", dtype=torch.float16):
            loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        if i in inf_in:
            model[inf_in[i]].weight.grad[0, 0] = INF
        scaler.step(fused)
        scaler.step(loop)
        scaler.update()
        fused.zero_grad(set_to_none=True)
        loop.zero_grad(set_to_none=True)
        scales.append(scaler.get_scale())
    return model, scales


def test_fused_and_for_loop_optimizers_in_one_step():
    inf_in = {1: 0, 3: 2}  # step 1: inf only in the fused optimizer's grads; step 3: only in the for-loop one's
    ref_model, ref_scales = _mixed_hand(inf_in)
    model = tiny_model()
    fused = torch.optim.SGD(model[0].parameters(), lr=0.1, fused=True)
    loop = torch.optim.Adam(model[2].parameters(), lr=1e-2, foreach=False)
    mp = MixedPrecision("fp16", "cpu", **KW)
    skipped, scales = [], []
    for i, (x, y) in enumerate(batches(4)):
        with mp.autocast():
            loss = nn.functional.cross_entropy(model(x), y)
        mp.backward(loss)
        if i in inf_in:
            model[inf_in[i]].weight.grad[0, 0] = INF
        r = mp.step([fused, loop], zero_grad=True)
        assert r.scale == mp.get_scale()
        skipped.append(r.skipped)
        scales.append(r.scale)
    assert skipped == [False, True, False, True]
    assert scales == ref_scales == [1024.0, 512.0, 512.0, 256.0]
    for p, q in zip(model.parameters(), ref_model.parameters()):
        assert torch.equal(p, q)


# ---------------------------------------------------------------- host-device syncs
SYNC_METHODS = ("item", "__bool__", "__float__", "__int__", "tolist")


@pytest.fixture
def count_syncs(monkeypatch):
    """Counts host reads of tensor values (on a GPU each is a host-device sync)."""
    counter = {"n": 0}
    for meth in SYNC_METHODS:
        orig = getattr(torch.Tensor, meth)

        def wrapped(self, *a, _orig=orig, **k):
            counter["n"] += 1
            return _orig(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, meth, wrapped)
    return counter


def _count_steps(counter, opts_factory, use_engine, steps=3):
    model = tiny_model()
    opts = opts_factory(model)
    mp = MixedPrecision("fp16", "cpu", **KW) if use_engine else None
    scaler = torch.amp.GradScaler("cpu", **KW)
    x, y = batches(1)[0]
    per_step = []
    for _ in range(steps):
        if use_engine:
            with mp.autocast():
                loss = nn.functional.cross_entropy(model(x), y)
            mp.backward(loss)
            n = counter["n"]
            mp.step(opts, zero_grad=True)
        else:
            with torch.autocast("cpu", dtype=torch.float16):
                loss = nn.functional.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            n = counter["n"]
            for o in opts:
                scaler.step(o)
            scaler.update()
            for o in opts:
                o.zero_grad(set_to_none=True)
        per_step.append(counter["n"] - n)
    return per_step


def _count_overflowing_steps(counter, use_engine, steps=12):
    """Every step's gradients overflow (the loss times inf): the engine's loss-scale alarm fires at
    step 10; the syncs per step are counted as in :func:`_count_steps`. The model is prepared, so the
    contract watch records the first forward and step too (no sync either)."""
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mp = MixedPrecision("fp16", "cpu", model=model, **KW)
    scaler = torch.amp.GradScaler("cpu", **KW)
    x, y = batches(1)[0]
    per_step = []
    for _ in range(steps):
        with torch.autocast("cpu", dtype=torch.float16):
            loss = nn.functional.cross_entropy(model(x), y) * INF
        n = counter["n"]
        if use_engine:
            mp.backward(loss)
            mp.step(opt, zero_grad=True)
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
        per_step.append(counter["n"] - n)
    return per_step, mp


@pytest.mark.filterwarnings("ignore::ampkit.LossScaleWarning")
def test_the_loss_scale_alarm_adds_no_sync(count_syncs):
    """Issue #22: the alarm decides from the host mirror: every step costs what the hand loop's does,
    except the one step that fires it, which reads the held loss once (issue #50: a finite loss with
    overflowing gradients is a scale problem, never a forward one) -- one read in the whole run."""
    hand, _ = _count_overflowing_steps(count_syncs, use_engine=False)
    engine, mp = _count_overflowing_steps(count_syncs, use_engine=True)
    assert len(set(hand)) == 1 and len(engine) == len(hand)
    assert mp.health()["status"] == "collapsed" and mp.health()["fired_at"] == 10
    extra = [e - h for e, h in zip(engine, hand)]
    assert extra == [1 if i == mp.health()["fired_at"] - 1 else 0 for i in range(len(extra))]
    assert mp._watch.grads is not None  # the watch did record the first step


def test_no_sync_beyond_gradscalers_own_for_loop_and_foreach(count_syncs):
    # (CPU Adam also reads its host-side step counter with .item(); both loops do the same)
    def two(model):
        return [torch.optim.SGD(model[0].parameters(), lr=0.1, foreach=False),
                torch.optim.Adam(model[2].parameters(), lr=1e-2, foreach=True)]

    hand = _count_steps(count_syncs, two, use_engine=False)
    assert min(hand) >= 2  # at least GradScaler's one found_inf.item() per optimizer
    assert _count_steps(count_syncs, two, use_engine=True) == hand


def test_fused_costs_one_sync_per_step_however_many_fused_optimizers(count_syncs):
    def two_fused(model):
        return [torch.optim.SGD(model[0].parameters(), lr=0.1, fused=True),
                torch.optim.AdamW(model[2].parameters(), lr=1e-2, fused=True)]

    assert _count_steps(count_syncs, two_fused, use_engine=False) == [0, 0, 0]  # the kernel skips on the device
    assert _count_steps(count_syncs, two_fused, use_engine=True) == [1, 1, 1]


# ---------------------------------------------------------------- identity, not id()
PHASES = [("SGD", "for-loop"), ("SGD", "for-loop"), ("Adam", "fused"), ("Adam", "fused"),
          ("AdamW", "foreach"), ("SGD", "fused")]


def _at_a_freed_address(name, freed_ids):
    """An uninitialized optimizer of ``name``'s class, at the address of one freed before where CPython
    hands one back (the precondition below): fresh objects taken and held until one lands on a freed
    address (the allocator reuses its free blocks, but other objects may have taken them first)."""
    cls = OPTIMIZERS[name][0]
    gc.collect()  # an optimizer kept by a cycle (its scheduler's) is freed now
    held = []
    for _ in range(200_000):  # a fragmented heap may hold many free blocks of this size ahead of it
        obj = cls.__new__(cls)
        if id(obj) in freed_ids or not freed_ids:
            return obj
        held.append(obj)
    return obj


def test_six_optimizers_created_and_freed_in_turn_every_skip_reported():
    model = tiny_model()
    mp = MixedPrecision("fp16", "cpu", **KW)
    data = batches(3 * len(PHASES))
    ids, skipped, expected, refs = [], [], [], []
    opt = None
    for phase, (name, impl) in enumerate(PHASES):
        opt = None  # the previous phase's optimizer freed first
        opt = _at_a_freed_address(name, ids)
        opt.__init__(model.parameters(), **OPTIMIZERS[name][1], **IMPLS[impl])
        ids.append(id(opt))
        refs.append(weakref.ref(opt))
        for k in range(3):
            x, y = data[3 * phase + k]
            bad = k == 1
            with mp.autocast():
                loss = nn.functional.cross_entropy(model(x), y) * (INF if bad else 1.0)
            mp.backward(loss)
            w = model[0].weight.detach().clone()
            r = mp.step(opt, zero_grad=True)
            assert r.scale == mp.get_scale(), f"phase {phase} step {k}"
            assert torch.equal(w, model[0].weight) == bad  # the weights say whether it stepped
            skipped.append(r.skipped)
            expected.append(bad)
    assert len(set(ids)) < len(ids), "precondition: an id() was reused (else this test proves nothing)"
    assert skipped == expected
    assert mp.stats["skipped"] == len(PHASES)
    opt = None
    gc.collect()
    assert all(r() is None for r in refs), "the engine keeps an optimizer alive"


def test_an_engine_gone_leaves_no_hook_on_the_optimizer():
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):  # a new engine per phase, one optimizer throughout
        mp = MixedPrecision("fp16", "cpu", **KW)
        x, y = batches(1)[0]
        with mp.autocast():
            loss = nn.functional.cross_entropy(model(x), y)
        mp.backward(loss)
        assert not mp.step(opt, zero_grad=True).skipped
        assert len(opt._optimizer_step_post_hooks) == 1
        del mp
        gc.collect()
        assert len(opt._optimizer_step_post_hooks) == 0


# ---------------------------------------------------------------- schedulers
def _run_plateau(mp, inject, metric_of, extra=None):
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=0)
    scheds = [plateau] if extra is None else [extra(opt), plateau]
    lrs = []
    for i, (x, y) in enumerate(batches(5)):
        with mp.autocast():
            loss = nn.functional.cross_entropy(model(x), y) * (INF if i in inject else 1.0)
        mp.backward(loss)
        r = mp.step(opt, scheds, metric=metric_of(i), zero_grad=True)
        assert r.skipped == (i in inject)
        lrs.append(opt.param_groups[0]["lr"])
    return lrs


@pytest.mark.parametrize("mode", ["fp16", "bf16", "fp32"])
def test_reduce_lr_on_plateau_with_metric(mode):
    # a metric that never improves: patience 0 halves the LR on every step taken after the first
    lrs = _run_plateau(MixedPrecision(mode, "cpu", init_scale=2.0**4), set(), lambda i: 1.0)
    assert lrs == [1.0, 0.5, 0.25, 0.125, 0.0625]


def test_reduce_lr_on_plateau_not_stepped_on_skipped_steps():
    # step 2 skipped: the plateau scheduler never sees its (bad) metric and does not count the step
    lrs = _run_plateau(MixedPrecision("fp16", "cpu", init_scale=2.0**4), {2}, lambda i: torch.tensor(1.0))
    assert lrs == [1.0, 0.5, 0.5, 0.25, 0.125]


def test_plateau_next_to_another_scheduler():
    lrs = _run_plateau(MixedPrecision("fp16", "cpu", init_scale=2.0**4), {1}, lambda i: float(10 - i),
                       extra=lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5))
    # the metric improves every step (the plateau leaves the LR alone); StepLR halves on steps taken
    assert lrs == [0.5, 0.5, 0.25, 0.125, 0.0625]


def test_plateau_without_metric_says_what_to_do():
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
    mp = MixedPrecision("fp16", "cpu")
    with pytest.raises(ValueError, match="metric=val_loss"):
        mp.step(opt, plateau)
