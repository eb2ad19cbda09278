"""FSDP2 (``fully_shard``) with the engine, in one CPU process (gloo, world size 1) (issue #10)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from ampkit.backends.torch.engine import MixedPrecision

dist = pytest.importorskip("torch.distributed")
if not dist.is_available():  # pragma: no cover
    pytest.skip("torch without distributed", allow_module_level=True)
fsdp = pytest.importorskip("torch.distributed.fsdp")
if not hasattr(fsdp, "fully_shard"):  # pragma: no cover
    pytest.skip("this torch has no FSDP2 (fully_shard)", allow_module_level=True)
from torch.distributed.fsdp._fully_shard import _fsdp_param_group  # noqa: E402  (to count reductions)
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler  # noqa: E402

ACCUM = 3


@pytest.fixture
def group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def model(shard: bool):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    if shard:
        fsdp.fully_shard(m[0])
        fsdp.fully_shard(m)  # two FSDP units: m[0], and the root holding m[2]
    return m


def micro_batches(n, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(4, 8, generator=g), torch.randint(0, 4, (4,), generator=g)) for _ in range(n)]


def local(t):
    return t.to_local() if hasattr(t, "to_local") else t


@pytest.fixture
def reductions(monkeypatch):
    calls = []
    orig = _fsdp_param_group.foreach_reduce

    def counting(*a, **k):
        calls.append(1)
        return orig(*a, **k)

    monkeypatch.setattr(_fsdp_param_group, "foreach_reduce", counting)
    return calls


@pytest.mark.parametrize("use_accumulate", [True, False])
def test_fsdp2_accumulation_reduce_scatters_once_per_step(group, reductions, use_accumulate):
    net = model(shard=True)
    mp = MixedPrecision("fp32", "cpu", accumulation_steps=ACCUM, model=net)
    for x, y in micro_batches(ACCUM):
        if use_accumulate:
            with mp.accumulate():
                mp.backward(nn.functional.cross_entropy(net(x), y))
        else:
            mp.backward(nn.functional.cross_entropy(net(x), y))
    # one reduce-scatter per FSDP unit on the last micro-batch only (two units), else one per micro-batch
    assert len(reductions) == (2 if use_accumulate else 2 * ACCUM)
    ref = model(shard=False)
    xs, ys = zip(*micro_batches(ACCUM))
    nn.functional.cross_entropy(ref(torch.cat(xs)), torch.cat(ys)).backward()
    for p, q in zip(net.parameters(), ref.parameters()):
        torch.testing.assert_close(local(p.grad), q.grad, rtol=1e-5, atol=1e-6)
    # and the sync flag is back on: a later plain backward reduces again
    before = len(reductions)
    x, y = micro_batches(1)[0]
    nn.functional.cross_entropy(net(x), y).backward()
    assert len(reductions) == before + 2


def _fp16_run(net, mp, steps=6, inject=(2,)):
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    out = []
    for i, (x, y) in enumerate(micro_batches(steps)):
        with mp.autocast():
            loss = nn.functional.cross_entropy(net(x), y) * (float("inf") if i in inject else 1.0)
        mp.backward(loss)
        r = mp.step(opt, zero_grad=True)
        assert r.scale == mp.get_scale()
        out.append((r.skipped, r.scale))
    return out


def test_load_state_dict_before_prepare_on_an_fsdp2_model_is_kept(group):
    saved = MixedPrecision("fp16", "cpu", init_scale=8.0, growth_interval=2).state_dict()
    saved["scaler"]["_growth_tracker"] = 1
    net = model(shard=True)
    mp = MixedPrecision("fp16", "cpu", init_scale=2.0**16)  # a different scale on purpose
    mp.load_state_dict(saved)
    mp.prepare(net)
    assert isinstance(mp.scaler, ShardedGradScaler)
    assert mp.get_scale() == 8.0 == mp.stats["scale"]
    # the tracker came along too: one clean step grows the scale (1 + 1 = growth_interval)
    assert _fp16_run(net, mp) == [(False, 16.0), (False, 16.0), (True, 8.0), (False, 8.0), (False, 16.0),
                                  (False, 16.0)]


@pytest.mark.parametrize("clip", [None, 1.0], ids=["noclip", "clip"])
def test_fused_optimizer_on_fsdp2_reports_skips(group, clip):
    net = model(shard=True)
    mp = MixedPrecision("fp16", "cpu", init_scale=2.0**4, growth_interval=2, model=net)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2, fused=True)
    for i, (x, y) in enumerate(micro_batches(4)):
        with mp.autocast():
            loss = nn.functional.cross_entropy(net(x), y) * (float("inf") if i == 1 else 1.0)
        mp.backward(loss)
        w = local(net[0].weight).detach().clone()
        r = mp.step(opt, max_grad_norm=clip, zero_grad=True)
        assert r.skipped == (i == 1) and r.scale == mp.get_scale()
        assert torch.equal(w, local(net[0].weight)) == (i == 1)


# ---------------------------------------------------------------- issue #22: the precision contract under FSDP2
def _policy_run(child_policy, root_policy, mode="fp32"):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    if child_policy is not None:
        fsdp.fully_shard(net[0], mp_policy=child_policy)
    else:
        fsdp.fully_shard(net[0])  # sharded without the policy the root declares
    fsdp.fully_shard(net, mp_policy=root_policy)
    mp = MixedPrecision(mode, "cpu", model=net)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    x, y = micro_batches(1)[0]
    with mp.autocast():
        loss = nn.functional.cross_entropy(net(x).float(), y)
    mp.backward(loss)
    mp.step(opt, zero_grad=True)  # the gradients are gone; verify reads what the step recorded
    return mp, net, opt


def test_fsdp2_a_reduce_dtype_the_root_declares_but_a_unit_never_got_is_one_finding(group):
    bf16_reduce = fsdp.MixedPrecisionPolicy(reduce_dtype=torch.bfloat16)
    mp, net, opt = _policy_run(None, bf16_reduce)
    (finding,) = mp.verify(net, opt)
    assert finding["check"] == "fsdp_reduce_dtype"
    assert finding["where"] == "FSDP unit 0 (Linear): gradients of weight, bias"
    assert finding["expected"] == "reduce_dtype=bfloat16 (the root's MixedPrecisionPolicy; this unit was given none)"
    assert finding["actual"] == "gradients hold values bfloat16 cannot: reduced in float32"
    assert "every fully_shard call" in finding["advice"]


def test_fsdp2_policies_that_are_applied_give_no_finding(group):
    bf16_reduce = fsdp.MixedPrecisionPolicy(reduce_dtype=torch.bfloat16)
    mp, net, opt = _policy_run(bf16_reduce, bf16_reduce)
    assert mp.verify(net, opt) == []
    both = fsdp.MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    mp, net, opt = _policy_run(both, both, mode="bf16")
    assert mp.verify(net, opt) == []


def test_fsdp2_a_policy_declared_but_not_applied_is_found_from_the_gradients(group, monkeypatch):
    """FSDP2 itself dropping a unit's reduce_dtype (simulated: the reduction handed no reduce dtype)."""
    orig = _fsdp_param_group.foreach_reduce

    def ignoring_reduce_dtype(fsdp_params, grads, group_, stream, *a, **k):
        names = list(inspect.signature(orig).parameters)
        args = dict(zip(names, (fsdp_params, grads, group_, stream) + a), **k)
        args["reduce_dtype"] = None
        return orig(**args)

    import inspect

    monkeypatch.setattr(_fsdp_param_group, "foreach_reduce", ignoring_reduce_dtype)
    bf16_reduce = fsdp.MixedPrecisionPolicy(reduce_dtype=torch.bfloat16)
    mp, net, opt = _policy_run(bf16_reduce, bf16_reduce)
    found = mp.verify(net, opt)
    assert [f["where"] for f in found] == ["FSDP unit model (Sequential): gradients of weight, bias",
                                          "FSDP unit 0 (Linear): gradients of weight, bias"]
    assert all(f["expected"] == "reduce_dtype=bfloat16 (its MixedPrecisionPolicy)" for f in found)


def test_fsdp2_a_unit_without_the_roots_param_dtype_is_one_finding_under_autocast(group):
    # without autocast this arrangement fails loudly (bf16 input, float32 weight); under bf16
    # autocast it runs, and unit 0 silently keeps float32 weights (its gradients, made by bf16
    # matmuls, fit bfloat16 either way: the reduction cannot be told apart here)
    mp, net, opt = _policy_run(None, fsdp.MixedPrecisionPolicy(param_dtype=torch.bfloat16), mode="bf16")
    (finding,) = mp.verify(net, opt)
    assert (finding["check"], finding["where"]) == ("fsdp_param_dtype", "FSDP unit 0 (Linear): weight, bias")
    assert finding["expected"] == "param_dtype=bfloat16 (the root's MixedPrecisionPolicy; this unit was given none)"
    assert finding["actual"] == "float32 weights in the forward"


def test_sharded_scaler_mirror_is_exact_with_factors_float32_cannot_hold(group):
    """ShardedGradScaler on a CPU updates with its Python fallback (float32 factors, no finiteness
    check), not torch's kernel (double factors): the mirror follows that rule there (issue #22)."""
    net = model(shard=True)
    mp = MixedPrecision("fp16", "cpu", init_scale=1000.0, growth_factor=3.0, backoff_factor=0.3, growth_interval=1,
                        model=net)
    out = _fp16_run(net, mp, steps=9, inject=(1, 2, 3, 5, 6, 7))  # asserts scale == get_scale() at each step
    assert [s for s, _ in out] == [False, True, True, True, False, True, True, True, False]
    assert out[3][1] != 1000.0 * 0.3**3  # (the product in double differs: the float32 rule mattered)


def test_an_fsdp2_engine_pickles_with_its_sharded_scaler(group):
    """ShardedGradScaler holds a process group, which does not pickle: the scaling travels as its
    state_dict and is rebuilt (issue #22)."""
    import pickle

    net = model(shard=True)
    mp = MixedPrecision("fp16", "cpu", init_scale=2.0**4, growth_factor=3.0, backoff_factor=0.3, growth_interval=2,
                        model=net)
    _fp16_run(net, mp, steps=3, inject=(1,))
    dup = pickle.loads(pickle.dumps(mp))
    assert isinstance(dup.scaler, ShardedGradScaler) and dup.model is None
    assert dup.state_dict() == mp.state_dict() and dup.get_scale() == mp.get_scale()
    dup.prepare(net)
    out = _fp16_run(net, dup, steps=3, inject=(0,))  # (asserts scale == get_scale() at each step)
    assert [s for s, _ in out] == [True, False, False]
    assert out[0][1] < mp.stats["scale"] and out[2][1] > out[1][1]  # backed off by 0.3, grown by 3 two steps on
