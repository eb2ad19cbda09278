"""ampkit.MixedPrecision against hand-written torch.amp loops, on CPU with tiny models."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

import ampkit
from ampkit.backends.torch import tf32
from ampkit.backends.torch.engine import MixedPrecision

CPU = torch.device("cpu")


def tiny_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def batches(n, seed=1, bs=6):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(bs, 8, generator=g), torch.randint(0, 4, (bs,), generator=g)) for _ in range(n)]


# losses multiplied by these at given steps: inf and NaN injected, the rest clean
INJECT = {2: float("inf"), 5: float("nan"), 6: float("inf")}
SCALER_KW = dict(init_scale=2.0**4, growth_factor=2.0, backoff_factor=0.5, growth_interval=2)


def hand_loop(steps):
    """The reference: torch.amp.GradScaler used exactly as its docs say."""
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", **SCALER_KW)
    scales, skipped = [], []
    for i, (x, y) in enumerate(batches(steps)):
        with torch.autocast("cpu", dtype=torch.float16):
            loss = nn.functional.cross_entropy(model(x), y)
        loss = loss * INJECT.get(i, 1.0)
        before = opt.state_dict()["state"]
        w0 = model[0].weight.detach().clone()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        skipped.append(bool(torch.equal(w0, model[0].weight)))
        scales.append(scaler.get_scale())
        del before
    return model, scales, skipped


def engine_loop(steps, mp=None, model=None, opt=None, start=0):
    model = model or tiny_model()
    opt = opt or torch.optim.SGD(model.parameters(), lr=0.05)
    mp = mp or MixedPrecision("fp16", "cpu", **SCALER_KW)
    scales, skipped = [], []
    for i, (x, y) in enumerate(batches(steps)):
        if i < start:
            continue
        with mp.autocast():
            loss = nn.functional.cross_entropy(model(x), y)
        mp.backward(loss * INJECT.get(i, 1.0))
        r = mp.step(opt, zero_grad=True)
        scales.append(r.scale)
        skipped.append(r.skipped)
        assert r.scale == mp.get_scale(), "host mirror of the scale drifted from GradScaler's tensor"
    return model, opt, mp, scales, skipped


# ---------------------------------------------------------------- acceptance 1
def test_fp16_scale_history_skips_and_weights_match_gradscaler():
    ref_model, ref_scales, ref_skipped = hand_loop(10)
    model, _, mp, scales, skipped = engine_loop(10)
    # growth (x2 every 2 clean steps), backoff on inf and on NaN, skips: all exercised
    assert scales == ref_scales
    assert skipped == ref_skipped
    assert skipped == [i in INJECT for i in range(10)]
    assert scales == [16.0, 32.0, 16.0, 16.0, 32.0, 16.0, 8.0, 8.0, 16.0, 16.0]
    for p, q in zip(model.parameters(), ref_model.parameters()):
        assert torch.equal(p, q)
    assert mp.stats == {"steps": 10, "skipped": 3, "scale": 16.0, "scale_min": 8.0, "scale_max": 32.0}


def test_scale_growth_stops_at_float32_max_like_gradscaler():
    mp = MixedPrecision("fp16", "cpu", init_scale=2.0**127, growth_interval=1)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    x, y = batches(1)[0]
    for _ in range(2):
        with mp.autocast():
            loss = nn.functional.cross_entropy(model(x), y)
        mp.backward(loss * 0.0)  # zero grads: finite, so growth is attempted
        r = mp.step(opt, zero_grad=True)
        assert r.scale == mp.get_scale()


# ---------------------------------------------------------------- acceptance 2
@pytest.mark.parametrize("mode,dtype", [("fp16", torch.float16), ("bf16", torch.bfloat16), ("fp32", torch.float32)])
def test_dtypes_inside_autocast(mode, dtype):
    mp = MixedPrecision(mode, "cpu")
    lin = nn.Linear(4, 4)
    with mp.autocast():
        out = lin(torch.randn(2, 4))
    assert out.dtype == dtype
    assert lin.weight.dtype == torch.float32
    assert (mp.scaler is not None) == (mode == "fp16")


def test_bf16_has_no_scaler_and_scale_is_one():
    mp = MixedPrecision("bf16-mixed", "cpu")
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = batches(1)[0]
    with mp.autocast():
        loss = nn.functional.cross_entropy(model(x), y)
    mp.backward(loss)
    r = mp.step(opt)
    assert mp.scaler is None and r.scale == 1.0 and r.skipped is False


def test_fp32_forces_tf32_off_and_restores_flags():
    """fp32 on CUDA: TF32 forced off for a call and a region, the flags restored (the CUDA engine's
    own region: tests/backends/torch/test_gpu.py); on a CPU the CUDA flags change no math the engine
    runs, and an fp32 engine leaves them alone (flipping them three times a step cost 0.2-0.6 ms)."""
    before = tf32.get_flags()
    tf32.set_flags(tf32.flags_for(True))
    try:
        math = tf32.tf32_math(False, "cuda")
        assert tf32.tf32_enabled()
        with math.region():
            assert not tf32.tf32_enabled()
            out = nn.Linear(3, 3)(torch.randn(1, 3))
        assert out.dtype == torch.float32
        assert tf32.tf32_enabled(), "flags not restored after the region"
        assert math.run(tf32.tf32_enabled) is False and tf32.get_flags() == tf32.flags_for(True)
        mp = MixedPrecision("fp32", "cpu")
        with mp.autocast():
            assert tf32.tf32_enabled()  # a CPU engine: CUDA's flags as the user left them
        assert isinstance(tf32.tf32_math(False, "cpu"), type(tf32.tf32_math(None)))
    finally:
        tf32.set_flags(before)
    assert tf32.get_flags() == before


def test_tf32_scope_turns_on_and_restores():
    before = tf32.get_flags()
    with tf32.tf32_scope(True):
        assert tf32.tf32_enabled()
    assert tf32.get_flags() == before


def test_master_weights_in_half_are_refused():
    model = tiny_model().half()
    with pytest.raises(TypeError, match="float32 master weights"):
        MixedPrecision("fp16", "cpu", model=model)
    mp = MixedPrecision("fp16", "cpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(TypeError, match="model.half"):
        mp.step(opt)


def test_disabled_autocast_is_refused(monkeypatch):
    mp = MixedPrecision("bf16", "cpu")
    monkeypatch.setattr(torch, "is_autocast_enabled", lambda *a: False)
    with pytest.raises(ampkit.AutocastDisabledError, match="refusing to run bf16 as float32"):
        with mp.autocast():
            pass


def _autocast_state():
    return torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")


def test_reused_region_nests_and_restores_exactly():
    """mp.autocast() hands back one reused region per thread; entering it inside itself, inside a
    disabled torch.autocast, or twice in a row must behave like fresh torch.autocast objects."""
    mp = MixedPrecision("bf16", "cpu")
    lin = nn.Linear(4, 4)
    x = torch.randn(2, 4)
    outside = _autocast_state()
    region = mp.autocast()
    assert mp.autocast() is region  # reused: its torch.autocast is built once
    with region:
        assert lin(x).dtype == torch.bfloat16
        with torch.autocast("cpu", enabled=False):
            assert lin(x).dtype == torch.float32
            with mp.autocast():  # the same object, entered while entered
                assert lin(x).dtype == torch.bfloat16
            assert lin(x).dtype == torch.float32, "the inner region did not restore the disabled state"
        w = torch.randn(4, 4)  # not a parameter: autocast's weight cache keeps no cast of it
        with torch.autocast("cpu", dtype=torch.float16):
            with mp.autocast():
                assert (x @ w).dtype == torch.bfloat16
            assert (x @ w).dtype == torch.float16, "the inner region did not restore float16"
        assert lin(x).dtype == torch.bfloat16
    assert _autocast_state() == outside, "the outer region restored an inner region's state"
    for _ in range(3):  # sequential reuse
        with mp.autocast():
            assert lin(x).dtype == torch.bfloat16
        assert _autocast_state() == outside
    with pytest.raises(RuntimeError, match="boom"):  # an exception inside leaves nothing behind
        with mp.autocast():
            raise RuntimeError("boom")
    assert _autocast_state() == outside
    with mp.autocast():
        assert lin(x).dtype == torch.bfloat16


def test_regions_in_two_threads_are_independent():
    """The worker enters, the main thread enters (from inside a float16 autocast), the worker
    leaves first: each thread must get back exactly its own state."""
    import threading

    mp = MixedPrecision("bf16", "cpu")
    x, w = torch.randn(2, 4), torch.randn(4, 4)
    entered, release, seen = threading.Event(), threading.Event(), {}

    def worker():
        with mp.autocast():
            entered.set()
            release.wait(10)
            seen["worker"] = (x @ w).dtype
        seen["worker_after"] = _autocast_state()

    outside = _autocast_state()
    t = threading.Thread(target=worker)
    t.start()
    assert entered.wait(10)
    with torch.autocast("cpu", dtype=torch.float16):
        with mp.autocast():  # this thread's region while the worker's is entered
            release.set()
            t.join(10)  # the worker leaves its region first
            seen["main"] = (x @ w).dtype
        seen["main_after"] = (x @ w).dtype
    assert seen == {"worker": torch.bfloat16, "worker_after": outside,
                    "main": torch.bfloat16, "main_after": torch.float16}
    assert _autocast_state() == outside


def test_alternating_optimizers_each_report_their_own_skip():
    """Two optimizers stepped in turn (one per call, the one-entry cache switching every step)."""
    mp = MixedPrecision("fp16", "cpu", init_scale=2.0**4, growth_interval=1000)
    models = [tiny_model(0), tiny_model(1)]
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in models]
    x, y = batches(1)[0]
    skips = []
    for i in range(6):
        k = i % 2
        with mp.autocast():
            loss = nn.functional.cross_entropy(models[k](x), y)
        mp.backward(loss * (float("inf") if i in (1, 4) else 1.0))
        skips.append(mp.step(opts[k], zero_grad=True).skipped)
    assert skips == [False, True, False, False, True, False]
    assert mp.stats["skipped"] == 2 and mp.get_scale() == 4.0


# ---------------------------------------------------------------- acceptance 3
@pytest.mark.parametrize("mode", ["fp32", "fp16"])
def test_accumulation_equals_whole_batch_and_steps_once(mode):
    n = 3
    xs, ys = zip(*batches(n, bs=4))
    whole_x, whole_y = torch.cat(xs), torch.cat(ys)

    ref = tiny_model()
    loss = nn.functional.cross_entropy(ref(whole_x), whole_y)
    loss.backward()
    ref_grads = [p.grad.clone() for p in ref.parameters()]

    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = []
    opt.register_step_post_hook(lambda *a: steps.append(1))
    # growth_interval large and a small scale so no overflow; fp16 compute makes grads approximate
    mp = MixedPrecision(mode, "cpu", accumulation_steps=n, init_scale=1.0)
    grads_seen = []
    for x, y in zip(xs, ys):
        with mp.accumulate(model):
            with mp.autocast():
                loss = nn.functional.cross_entropy(model(x), y)
            mp.backward(loss)
    scale = mp.get_scale()
    grads_seen = [p.grad.clone() / scale for p in model.parameters()]
    r = mp.step(opt)
    assert len(steps) == 1 and not r.skipped
    tol = dict(rtol=0, atol=1e-6) if mode == "fp32" else dict(rtol=1e-2, atol=2e-3)
    for g, h in zip(grads_seen, ref_grads):
        torch.testing.assert_close(g, h, **tol)


def test_grad_norm_is_unscaled_and_clipping_happens_after_unscale():
    model = tiny_model()
    ref = tiny_model()
    x, y = batches(1)[0]
    nn.functional.cross_entropy(ref(x), y).backward()
    ref_norm = torch.nn.utils.get_total_norm([p.grad for p in ref.parameters()]).item() if hasattr(
        torch.nn.utils, "get_total_norm") else math.sqrt(sum(float(p.grad.pow(2).sum()) for p in ref.parameters()))

    mp = MixedPrecision("fp16", "cpu", init_scale=2.0**10)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    with mp.autocast():
        loss = nn.functional.cross_entropy(model(x), y)
    mp.backward(loss)
    r = mp.step(opt, max_grad_norm=1e-3)
    assert not r.skipped
    assert r.grad_norm == pytest.approx(ref_norm, rel=1e-2)  # unscaled: ~1, not ~1024
    clipped = math.sqrt(sum(float(p.grad.float().pow(2).sum()) for p in model.parameters()))
    assert clipped == pytest.approx(1e-3, rel=1e-2)


def test_scheduler_not_stepped_on_skipped_step():
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    mp = MixedPrecision("fp16", "cpu", init_scale=2.0**4)
    lrs = []
    for i, (x, y) in enumerate(batches(4)):
        with mp.autocast():
            loss = nn.functional.cross_entropy(model(x), y)
        mp.backward(loss * (float("inf") if i == 1 else 1.0))
        r = mp.step(opt, scheduler=sched, zero_grad=True)
        assert r.skipped == (i == 1)
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs == [0.5, 0.5, 0.25, 0.125]


def test_two_optimizers_share_one_scaler_and_one_update():
    model = tiny_model()
    opt_a = torch.optim.SGD(model[0].parameters(), lr=0.1)
    opt_b = torch.optim.Adam(model[2].parameters(), lr=0.01)
    mp = MixedPrecision("fp16", "cpu", init_scale=2.0**4, growth_interval=1)
    x, y = batches(1)[0]
    with mp.autocast():
        loss = nn.functional.cross_entropy(model(x), y)
    mp.backward(loss)
    w_a, w_b = model[0].weight.clone(), model[2].weight.clone()
    r = mp.step([opt_a, opt_b])
    assert not r.skipped
    assert r.scale == 32.0  # ONE update: one growth, not two
    assert not torch.equal(w_a, model[0].weight) and not torch.equal(w_b, model[2].weight)
    # an inf in one optimizer's grads: the whole step counts as skipped, one backoff
    with mp.autocast():
        loss = nn.functional.cross_entropy(model(x), y)
    mp.backward(loss)
    model[2].weight.grad[0, 0] = float("inf")
    r = mp.step([opt_a, opt_b], zero_grad=True)
    assert r.skipped and r.scale == 16.0 and mp.get_scale() == 16.0


# ---------------------------------------------------------------- acceptance 4
def test_resume_from_state_dict_matches_uninterrupted_run(tmp_path):
    full_model, _, _, full_scales, full_skipped = engine_loop(10)

    model, opt, mp, first_scales, first_skipped = engine_loop(4)
    path = tmp_path / "ckpt.pt"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "amp": mp.state_dict()}, path)

    ckpt = torch.load(path, weights_only=True)
    model2 = tiny_model(seed=123)  # different init: everything must come from the checkpoint
    model2.load_state_dict(ckpt["model"])
    opt2 = torch.optim.SGD(model2.parameters(), lr=0.05)
    opt2.load_state_dict(ckpt["opt"])
    mp2 = MixedPrecision("fp16", "cpu", init_scale=1.0)  # wrong init scale on purpose
    mp2.load_state_dict(ckpt["amp"])
    _, _, mp2, rest_scales, rest_skipped = engine_loop(10, mp=mp2, model=model2, opt=opt2, start=4)

    assert first_scales + rest_scales == full_scales
    assert first_skipped + rest_skipped == full_skipped
    for p, q in zip(model2.parameters(), full_model.parameters()):
        assert torch.equal(p, q)
    assert mp2.stats["steps"] == 10 and mp2.stats["skipped"] == 3


def test_load_state_dict_rejects_another_mode():
    sd = MixedPrecision("fp16", "cpu").state_dict()
    with pytest.raises(ValueError, match="saved in mode 'fp16'"):
        MixedPrecision("bf16", "cpu").load_state_dict(sd)


# ---------------------------------------------------------------- acceptance 6
@pytest.mark.parametrize("alias,mode", [
    ("32", "fp32"), ("32-true", "fp32"), ("float32", "fp32"), ("FP32", "fp32"),
    ("16", "fp16"), ("16-mixed", "fp16"), ("mixed_float16", "fp16"), ("float16", "fp16"), ("half", "fp16"),
    ("bf16-mixed", "bf16"), ("mixed_bfloat16", "bf16"), ("bfloat16", "bf16"), ("BF16", "bf16"),
    ("tf32", "tf32"), ("auto", "auto"),
])
def test_aliases(alias, mode):
    assert ampkit.parse_mode(alias) == mode


def test_lightning_int_precisions_and_indexed_cpu_devices():
    """precision=16 / 32 as Lightning takes them; "cpu:0" and torch.device("cpu", 0) are the CPU."""
    mp = MixedPrecision(16, "cpu:0")
    assert mp.mode == "fp16" and mp.device == torch.device("cpu") and mp.scaler is not None
    assert MixedPrecision(32, torch.device("cpu", 0)).mode == "fp32"
    for bad in (True, 8, 16.0):
        with pytest.raises(ValueError, match="valid modes"):
            MixedPrecision(bad, "cpu")
    for bad in ("cpu:x", "cpu0", "cpu:0:1"):
        with pytest.raises(ValueError, match="unknown device"):
            MixedPrecision("bf16", bad)


def test_unknown_mode_lists_valid_ones():
    with pytest.raises(ValueError, match="valid modes: fp32, tf32, fp16, bf16, fp8, auto"):
        MixedPrecision("fp12", "cpu")


@pytest.mark.parametrize("mode,why", [("tf32", "TF32 is a tensor-core math mode")])  # fp8: torchao emulates it (test_engine_fp8)
def test_mode_the_cpu_cannot_run_raises_with_reason(mode, why):
    with pytest.raises(ampkit.ModeUnavailableError, match=why):
        MixedPrecision(mode, "cpu")


def test_bf16_on_a_gpu_without_it_raises(monkeypatch):
    from ampkit.backends.torch import devices

    monkeypatch.setattr(devices, "cuda_capability", lambda d: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "Tesla T4")
    ok, why = devices.mode_support("bf16", torch.device("cuda:0"))
    assert not ok and "compute capability >= 8.0" in why and "7.5" in why
    mode, reason = devices.resolve_auto(torch.device("cuda:0"))
    assert mode == "fp16" and "7.5" in reason


def test_auto_resolves_with_a_reason():
    mp = MixedPrecision("auto", "cpu")
    from ampkit import auto_cache
    from ampkit.backends.torch.devices import auto_fingerprint

    # auto follows what was measured on this machine (the doctor's cache, or its own quick check,
    # which it caches): never a capability table
    entry = auto_cache.load(auto_fingerprint(torch.device("cpu")))
    assert entry is not None and mp.mode == entry["recommended"]
    assert "bf16" in mp.reason and "measured" in mp.reason


def test_cuda_device_without_cuda_is_a_usage_error():
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    with pytest.raises(ampkit.UsageError, match="CUDA is not available"):
        MixedPrecision("fp16", "cuda")
