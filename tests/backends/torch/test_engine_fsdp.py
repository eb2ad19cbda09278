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
