"""Issue 21: bench is one flow (ampkit.bench.driver) over a backend's small operations, and its
config is frozen and checked once, at construction, with the CLI's sentences.

The backend here is plain Python (``plain_backend.py``): each mode still runs in a fresh child,
which loads it by its spec."""

from __future__ import annotations

import dataclasses

import pytest

import ampkit
from ampkit.bench import driver
from ampkit.bench.config import BenchConfig
from ampkit.errors import UsageError
from ampkit.registry import _REGISTERED


@pytest.fixture()
def plain(monkeypatch):
    monkeypatch.setitem(_REGISTERED, "plain", "plain_backend:PlainBackend")
    return "plain"


# ---------------------------------------------------------------- the config
@pytest.mark.parametrize("kwargs, message", [
    ({"steps": 0}, "--steps must be >= 1 and at most 1,000,000; received 0"),
    ({"warmup": -1}, "--warmup must be >= 0 and at most 1,000,000; received -1"),
    ({"repeats": 0}, "--repeats must be >= 1"),
    ({"num_classes": 0}, "--num-classes must be >= 1"),
    ({"search_cap": 0}, "--max-batch-size must be >= 1"),
    ({"timeout": 0.0}, "--timeout must be a positive number"),
    ({"timeout": float("nan")}, "--timeout must be a positive number"),
    ({"batch_size": 0}, "--batch-size must be a positive integer"),
    ({"batch_size": 2**40}, "at most 1,048,576"),
    ({"batch_size": "many"}, "--batch-size must be a positive integer"),
    ({"memory_budget": "lots"}, "cannot read memory size 'lots'"),
    ({"memory_budget": 2**61}, "at most 2**60 bytes"),
    ({"memory_budget": "1GiB", "batch_size": 8}, "drop the explicit --batch-size"),
    ({"input_shape": (100000, 100000, 100)}, "values per sample"),
    ({"workload": "mlp", "model": "m:f"}, "not both"),
    ({"model": "m:f", "image_size": 8}, "a --model sets its own input shapes"),
    ({"seq_len": 70000}, "--seq-len must be >= 1 and at most 65,536"),
    ({"modes": "fp32,fp12"}, "fp12"),
])
def test_config_refuses_bad_values_with_the_flags_sentence(kwargs, message):
    with pytest.raises(UsageError, match=message.replace("*", r"\*").replace("(", r"\(")):
        BenchConfig(**kwargs)


def test_config_is_frozen_and_normalised_once():
    cfg = BenchConfig(modes="fp32,half,auto", memory_budget="2GiB", input_shape=[3, 4, 4])
    assert cfg.modes == ("fp32", "fp16", "auto") and cfg.input_shape == (3, 4, 4)
    assert cfg.memory_budget == 2 * 2**30 and cfg.batch_size == "auto"  # a budget implies the search
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.steps = 3
    assert BenchConfig.from_dict(cfg.to_dict()) == cfg
    assert BenchConfig.from_dict({**cfg.to_dict(), "auto_mode": "bf16"}) == cfg  # a document's extra keys


# ---------------------------------------------------------------- the flow, on a plain backend
def test_the_driver_runs_a_plain_backend_and_decides_in_the_report(plain):
    cfg = BenchConfig(modes="fp32,fp16,auto", steps=3, warmup=1)
    seen = []
    report = driver.run(cfg, plain, progress=seen.append)
    rows = {r.mode: r for r in report.results}
    assert list(rows) == ["fp32", "fp16", "bf16"]
    assert rows["fp32"].status == rows["bf16"].status == "ok" and rows["fp16"].status == "unsupported"
    assert rows["bf16"].resolved_from == "auto" and rows["bf16"].resolved_reason == "plain bf16 is twice as fast"
    assert rows["bf16"].speedup_vs_fp32 > 1 and rows["fp32"].tflops == pytest.approx(1000.0 * rows["fp32"].samples_per_s / 1e12)
    assert report.workload == "tiny" and report.device == "plain:0" and report.framework == "plain"
    assert report.note == "no --workload given: ran the default for a CPU device, 'tiny'"
    assert report.environment == {"framework": "plain", "device": "plain:0", "plain_probe": "yes"}
    doc = report.to_dict()["config"]
    assert doc["workload"] == "tiny" and doc["modes"] == ["fp32", "fp16", "bf16"]
    assert doc["auto_mode"] == "bf16" and doc["auto_reason"] and doc["batch_size_hint"] == 64
    assert cfg.workload is None and cfg.modes == ("fp32", "fp16", "auto")  # what the run decided is the report's
    assert {m["kind"] for m in seen} >= {"start", "step"} and not report.failed


def test_batch_size_auto_runs_each_trial_in_a_fresh_child_for_such_a_backend(plain):
    (row,) = driver.run(BenchConfig(workload="small", modes="fp32", memory_budget=50_000, steps=2, warmup=0),
                        plain).results
    assert row.status == "ok", row.error
    assert 50 * 15 / 16 <= row.max_batch_size <= 50 and row.batch_size == row.max_batch_size
    assert all(ok == (peak <= 50_000) for _b, ok, peak in row.search)


def test_the_cpu_rule_the_probe_line_and_the_workload_check_are_the_drivers(plain):
    with pytest.raises(UsageError, match="on a CPU, --batch-size auto needs --memory-budget"):
        driver.run(BenchConfig(batch_size="auto"), plain)
    with pytest.raises(UsageError, match="unknown workload 'huge' for --framework plain"):
        driver.run(BenchConfig(workload="huge"), plain)
    with pytest.raises(UsageError) as err:  # probed in an isolated child: the one line comes back
        driver.run(BenchConfig(model="broken:model", input_shape=(5,)), plain)
    assert str(err.value).startswith("broken:model failed a training step on a probe batch of 2 with "
                                     "--input-shape 5 and --num-classes 10: ValueError: shapes")


def test_the_library_entry_goes_through_the_driver(plain):
    report = ampkit.bench("small", framework=plain, modes=["fp32"], steps=2, warmup=0)
    assert report.framework == "plain" and report.workload == "small" and report.note is None
    assert [r.status for r in report.results] == ["ok"]
