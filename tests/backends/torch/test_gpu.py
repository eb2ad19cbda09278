"""GPU code paths. Marked `gpu`: they skip cleanly without CUDA (see conftest.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from ampkit.backends.torch.engine import MixedPrecision

pytestmark = pytest.mark.gpu


def _cc():
    return torch.cuda.get_device_capability(0)


def test_fp16_autocast_dtype_and_scaler_on_cuda():
    mp = MixedPrecision("fp16", "cuda")
    lin = nn.Linear(8, 8).cuda()
    with mp.autocast():
        out = lin(torch.randn(4, 8, device="cuda"))
    assert out.dtype == torch.float16 and lin.weight.dtype == torch.float32
    assert mp.scaler is not None


def test_tf32_is_really_on_and_flags_restored():
    if _cc() < (8, 0):
        pytest.skip("TF32 needs compute capability >= 8.0")
    from ampkit.backends.torch import tf32, tf32_probe

    before = tf32.get_flags()
    ok, detail = tf32_probe.check(MixedPrecision("tf32", "cuda"), torch.device("cuda"), expect_tf32=True)
    assert ok, detail
    ok, detail = tf32_probe.check(MixedPrecision("fp32", "cuda"), torch.device("cuda"), expect_tf32=False)
    assert ok, detail
    assert tf32.get_flags() == before


def test_doctor_on_cuda():
    from ampkit.doctor import run_doctor

    rep = run_doctor("torch", "cuda")
    assert rep.modes["fp32"].selftest == "pass"
    assert rep.modes["fp16"].selftest == "pass" and rep.modes["fp16"].speedup is not None
    cc = _cc()
    assert rep.modes["tf32"].supported == (cc >= (8, 0))
    assert rep.modes["bf16"].supported == (cc >= (8, 0))
    if rep.modes["tf32"].supported:
        assert rep.modes["tf32"].selftest == "pass", rep.modes["tf32"].selftest_detail
    assert rep.modes["fp8"].supported == (cc >= (8, 9)) or not rep.modes["fp8"].supported
    if rep.modes["fp8"].supported:
        assert rep.modes["fp8"].selftest == "pass", rep.modes["fp8"].selftest_detail
    assert rep.environment["gpus"] and rep.environment["compute_capability"] == f"{cc[0]}.{cc[1]}"


def test_nvml_environment():
    pytest.importorskip("pynvml")
    from ampkit.backends.torch.environment import torch_environment

    env = torch_environment(torch.device("cuda"))
    assert env["nvml"] is None or env["nvml"][0]["memory_total_bytes"] > 0


def test_bf16_raises_on_gpu_without_it():
    if _cc() >= (8, 0):
        pytest.skip("this GPU has bf16")
    from ampkit import ModeUnavailableError

    with pytest.raises(ModeUnavailableError, match="8.0"):
        MixedPrecision("bf16", "cuda")


def _ampkit_json(*args):
    import json
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "ampkit", *args, "--json", "-"], capture_output=True, text=True,
                       timeout=900)
    return r.returncode, json.loads(r.stdout) if r.stdout.strip() else None, r.stderr


def test_bench_on_cuda_with_auto_batch_and_mfu():
    rc, doc, err = _ampkit_json("bench", "--device", "cuda", "--workload", "mlp", "--modes", "fp32,fp16",
                                "--batch-size", "auto", "--max-batch-size", "4096", "--steps", "5", "--warmup", "2")
    assert rc == 0, err
    for row in doc["results"]:
        assert row["status"] == "ok" and row["max_batch_size"] and row["batch_size"] == row["max_batch_size"]
        assert row["peak_memory_bytes"] > 0 and row["step_ms"]["p50"] > 0
        assert row["memory_source"] == "torch.cuda.max_memory_allocated"


def test_parity_and_audit_on_cuda():
    rc, doc, err = _ampkit_json("parity", "--device", "cuda", "--seeds", "2", "--epochs", "5")
    assert rc in (0, 1) and doc["device"].startswith("cuda"), err
    assert all(p["metric"]["mean"] > 0.85 for p in doc["results"])
    rc, doc, err = _ampkit_json("audit", "--device", "cuda", "--workload", "mlp", "--mode", "fp16")
    assert rc == 0 and doc["findings"] == [] and doc["device"].startswith("cuda"), err
