"""Issue 23: bench --explain on PyTorch, in-process on a tiny --model: a breakdown whose shares sum
to 1, casts only where autocast casts, loss scaling only in fp16, an explanation naming what grew;
without --explain the profiler is never entered; on CUDA (gpu marker) host_idle is measured."""

from __future__ import annotations

import math

import pytest
import torch

from ampkit.backends.torch.backend import TorchBackend
from ampkit.bench.config import BenchConfig
from ampkit.bench.explain import explain_rows
from ampkit.bench.ops import MeasureRequest
from ampkit.bench.report import derive_relative
from ampkit.bench.runner import measure_mode


def _cfg(**kw) -> BenchConfig:
    return BenchConfig(model="explain_models:small", input_shape=(64,), batch_size=32, steps=6, warmup=2,
                       explain=True, **kw)


def _measure(mode: str, cfg: BenchConfig, device="cpu"):
    """The mode as a bench child measures it: the backend's row, then the driver's size table."""
    backend = TorchBackend()
    return measure_mode(backend, MeasureRequest(cfg, mode, backend.target(device)), lambda *a: None)


def test_breakdown_shares_casts_and_loss_scaling_per_mode():
    rows = [_measure(m, _cfg()) for m in ("fp32", "bf16", "fp16")]
    for r in rows:
        assert r.status == "ok", r.error
        assert math.isclose(sum(r.breakdown.values()), 1.0, abs_tol=0.05)
        assert math.isclose(sum(r.breakdown_ms.values()), r.step_ms["p50"], rel_tol=0.05)
        assert r.explain_detail["steps"] == 1 and r.explain_detail["source"].startswith("torch.profiler")
        # the model's matmuls, from the recorded shapes: batch 32 through 64 -> 64 and 64 -> 10
        assert {(m["m"], m["n"], m["k"]) for m in r.explain_detail["matmuls"]} >= {(32, 64, 64), (32, 10, 64)}
    fp32, bf16, fp16 = rows
    assert fp32.breakdown["casts"] < 0.01 and bf16.breakdown["casts"] > 0 and fp16.breakdown["casts"] > 0
    assert fp32.breakdown["loss_scaling"] < 0.01 and fp16.breakdown["loss_scaling"] > 0
    assert fp32.explain_detail.get("size_table") is None
    assert set(bf16.explain_detail["size_table"]) == {"64", "256", "1024"}
    derive_relative(rows)
    explain_rows(rows, {"cpu": {"avx512_bf16": True}, "device": "cpu"})
    for r in rows[1:]:
        if r.speedup_vs_fp32 < 1:
            assert any(" grew most: " in s and " ms per step (+" in s for s in r.explanation), r.explanation
        sized = next(s for s in r.explanation if s.startswith("the model's largest matmul is "))
        assert "64" in sized.split(" (")[0] and "size table (the doctor's matmul vs fp32" in sized


def test_without_explain_the_profiler_is_never_entered(monkeypatch):
    entered = []
    real = torch.profiler.profile

    def spy(*a, **kw):
        entered.append(1)
        return real(*a, **kw)
    monkeypatch.setattr(torch.profiler, "profile", spy)
    plain = _measure("bf16", BenchConfig(model="explain_models:small", input_shape=(64,), batch_size=32, steps=3,
                                         warmup=1))
    assert plain.status == "ok" and plain.breakdown is None and plain.explanation is None and not entered
    explained = _measure("fp32", BenchConfig(model="explain_models:small", input_shape=(64,), batch_size=32, steps=3,
                                             warmup=1, explain=True))
    assert explained.status == "ok" and explained.breakdown is not None and entered == [1]


def test_explain_is_a_flag_of_the_config():
    with pytest.raises(Exception, match="explain must be True or False"):
        BenchConfig(explain="yes")


@pytest.mark.gpu
def test_cuda_breakdown_has_host_idle_and_sums_to_one():
    rows = [_measure(m, BenchConfig(model="explain_models:large", input_shape=(1000,), batch_size=256, steps=12,
                                    warmup=3, explain=True), "cuda") for m in ("fp32", "bf16")]
    for r in rows:
        assert r.status == "ok", r.error
        assert "host_idle" in r.breakdown and math.isclose(sum(r.breakdown.values()), 1.0, abs_tol=0.05)
        assert r.breakdown["matmul_conv"] > 0
    assert rows[1].breakdown["casts"] > 0 and rows[0].breakdown["casts"] < 0.01
    derive_relative(rows)
    explain_rows(rows, {"compute_capability": "9.0", "device": "cuda:0"})
    assert any("1000" in s and "not multiples of 8" in s for s in rows[1].explanation)
