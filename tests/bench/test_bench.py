"""ampkit bench at tiny sizes on the CPU."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from ampkit.bench.batch_search import largest_fitting
from ampkit.bench.config import parse_size
from ampkit.bench.peaks import peak_tflops
from ampkit.errors import UsageError
from helpers import assert_usage_error, default_sigint

ROW_KEYS = {"mode", "status", "error", "batch_size", "samples_per_s", "step_ms", "peak_memory_bytes",
            "max_batch_size", "speedup_vs_fp32", "memory_saving_vs_fp32", "skipped_steps", "final_loss",
            "tflops", "mfu"}

USER_MODELS = textwrap.dedent('''
    import time

    import torch
    import torch.nn as nn
    import ampkit
    from ampkit.backends.torch.workloads import classification_batches


    def bare():
        return nn.Sequential(nn.Flatten(), nn.Linear(48, 32), nn.ReLU(), nn.Linear(32, 5))


    def workload():
        def make_batch(n, device, gen):
            x = torch.randn(n, 16, generator=gen).to(device)
            return x, (x.sum(1, keepdim=True) > 0).float()
        return ampkit.Workload(model=nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1)),
                               make_batch=make_batch, loss_fn=nn.functional.binary_cross_entropy_with_logits,
                               flops_per_sample=12345.0, name="regressor", batch_size=8)


    class FailsInBf16(nn.Module):
        """A model with an op that does not support bfloat16 (simulated): only bf16 must fail."""
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(16, 4)
        def forward(self, x):
            if torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16:
                raise RuntimeError("myop_kernel not implemented for 'BFloat16'")
            return self.lin(x)


    def fails_in_bf16():
        return FailsInBf16()


    _FP16_FORWARDS = [0]


    class SleepsInFp16(nn.Module):
        """Fast in fp32 and in fp16's warm-up step (its process's first fp16 forward); each later forward
        under fp16 autocast notes itself in fp16_timed.log (in the working directory: a test can follow
        the run) and sleeps 4 s: a Ctrl-C lands in fp16's child."""
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(16, 4)
        def forward(self, x):
            if torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.float16:
                _FP16_FORWARDS[0] += 1
                if _FP16_FORWARDS[0] > 1:
                    with open("fp16_timed.log", "a") as f:
                        f.write("fp16 timed forward\\n")
                    time.sleep(4)
            return self.lin(x)


    def sleeps_in_fp16():
        return SleepsInFp16()


    def wide():
        return nn.Sequential(nn.Linear(256, 2048), nn.GELU(), nn.Linear(2048, 10))


    NOT_CALLABLE = 3


    def returns_int():
        return 42
''')


@pytest.fixture()
def user_dir(tmp_path, monkeypatch):
    (tmp_path / "usermodels.py").write_text(USER_MODELS)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def bench(*args, timeout=600, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "ampkit", "bench", "--device", "cpu", *args],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


def bench_json(*args, rc=0):
    r = bench(*args, "--json", "-")
    assert r.returncode == rc, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def bare_run(tmp_path_factory):
    """One bench of the bare factory (fp32, bf16) writing JSON, CSV and PNG to files, which the factory test
    and the outputs test both read: each bench costs a parent and a spawned child per mode, each importing torch."""
    folder = tmp_path_factory.mktemp("bare")
    (folder / "usermodels.py").write_text(USER_MODELS)
    out = folder / "out"
    out.mkdir()
    r = bench("--model", "usermodels:bare", "--input-shape", "3,4,4", "--num-classes", "5", "--modes", "fp32,bf16",
              "--steps", "3", "--warmup", "1", "--batch-size", "4", "--json", str(out / "b.json"),
              "--csv", str(out / "b.csv"), "--plot", str(out / "b.png"), cwd=folder)
    return r, out


# ---------------------------------------------------------------- user models
def test_bare_model_factory(bare_run):
    r, out = bare_run
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "b.json").read_text())
    assert doc["command"] == "bench" and doc["workload"] == "usermodels:bare" and doc["world_size"] == 1
    assert [r["mode"] for r in doc["results"]] == ["fp32", "bf16"]
    for r in doc["results"]:
        assert ROW_KEYS <= set(r) and r["status"] == "ok", r
        assert r["batch_size"] == 4 and r["samples_per_s"] > 0 and r["step_ms"]["p50"] > 0
        assert r["step_ms"]["p90"] >= r["step_ms"]["p50"] and r["peak_memory_bytes"] > 0
    assert doc["flops_per_sample"] > 0  # counted by torch's FLOP counter for the bare model


def test_workload_factory_and_ratio_consistency(user_dir):
    doc = bench_json("--model", "usermodels:workload", "--modes", "fp32,bf16", "--steps", "4", "--warmup", "1")
    rows = {r["mode"]: r for r in doc["results"]}
    assert doc["workload"] == "regressor" and doc["flops_per_sample"] == 12345.0
    assert all(r["status"] == "ok" and r["batch_size"] == 8 for r in rows.values())
    base = rows["fp32"]
    assert doc["pairing"] == "interleaved"
    for r in rows.values():  # interleaved: the median of the per-round samples/s ratios (2 rounds of 2 steps)
        ratios = [b / m for b, m in zip(base["round_ms"], r["round_ms"])]
        assert r["rounds"] == 2 and len(r["step_times_ms"]) == 4
        assert r["round_ms"] == [min(r["step_times_ms"][:2]), min(r["step_times_ms"][2:])]
        assert r["speedup_vs_fp32"] == pytest.approx(math.sqrt(ratios[0] * ratios[1]), rel=1e-9)
        assert r["memory_saving_vs_fp32"] == pytest.approx(base["peak_memory_bytes"] / r["peak_memory_bytes"], rel=1e-9)
        assert r["tflops"] == pytest.approx(12345.0 * r["samples_per_s"] / 1e12, rel=1e-9)
        assert r["mfu"] is None  # no peak table for a CPU
    assert base["speedup_vs_fp32"] == 1.0


def test_one_failing_mode_leaves_the_others_ok(user_dir, tmp_path):
    doc = bench_json("--model", "usermodels:fails_in_bf16", "--input-shape", "16", "--num-classes", "4",
                     "--modes", "fp32,bf16,fp16", "--steps", "2", "--warmup", "1", "--batch-size", "4", rc=1)
    rows = {r["mode"]: r for r in doc["results"]}
    assert rows["bf16"]["status"] == "error" and "BFloat16" in rows["bf16"]["error"]
    assert rows["bf16"]["speedup_vs_fp32"] is None
    assert rows["fp32"]["status"] == "ok" and rows["fp16"]["status"] == "ok"


def test_unsupported_mode_has_a_row_with_the_reason(user_dir):
    doc = bench_json("--model", "usermodels:bare", "--input-shape", "48", "--num-classes", "5",
                     "--modes", "tf32", "--steps", "1", "--warmup", "0")
    (row,) = doc["results"]
    assert row["status"] == "unsupported" and "CPU" in row["error"]


# ---------------------------------------------------------------- batch size auto
def test_auto_batch_within_memory_budget_and_double_is_not(user_dir):
    budget = 48 * 2**20
    doc = bench_json("--model", "usermodels:wide", "--input-shape", "256", "--modes", "fp32",
                     "--batch-size", "auto", "--memory-budget", "48MiB", "--steps", "2", "--warmup", "1")
    (row,) = doc["results"]
    assert row["status"] == "ok", row
    best = row["max_batch_size"]
    assert best and row["batch_size"] == best and row["search"]
    fitting = [b for b, ok, peak in row["search"] if ok]
    assert max(fitting) == best
    for _b, ok, peak in row["search"]:
        assert ok == (peak is not None and peak <= budget)
    assert row["peak_memory_bytes"] <= budget * 1.05  # the measured run itself, not only the trial
    # measured independently: twice the batch does not stay within the budget
    again = bench_json("--model", "usermodels:wide", "--input-shape", "256", "--modes", "fp32",
                       "--batch-size", str(2 * best), "--steps", "2", "--warmup", "1")
    assert again["results"][0]["peak_memory_bytes"] > budget


def test_largest_fitting_search():
    calls = []

    def fits(b):
        calls.append(b)
        return b <= 300

    best = largest_fitting(fits, start=32, cap=1 << 16)
    assert 300 >= best > 300 * 15 / 16 and not fits(2 * best)
    assert largest_fitting(lambda b: b <= 5, start=64) == 5
    assert largest_fitting(lambda b: False, start=8) is None
    assert largest_fitting(lambda b: True, start=8, cap=100) == 100


# ---------------------------------------------------------------- outputs
def test_json_csv_png_written(bare_run):
    r, out = bare_run
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "b.json").read_text())
    assert {"ampkit_version", "command", "environment", "workload", "framework", "device", "world_size",
            "results"} <= set(doc)
    lines = (out / "b.csv").read_text().splitlines()
    assert lines[0].startswith("mode,status,error,batch_size,samples_per_s") and len(lines) == 3
    png = (out / "b.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert "samples/s" in r.stdout  # the human table on stdout when JSON goes to a file


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("args,needle", [
    (["--workload", "resnet9000"], "unknown workload 'resnet9000'"),
    (["--modes", "fp32,fp12"], "unknown precision mode 'fp12'"),
    (["--model", "no_such_module_xyz:build"], "cannot import module 'no_such_module_xyz'"),
    (["--model", "usermodels:missing"], "has no attribute 'missing'"),
    (["--model", "usermodels:NOT_CALLABLE"], "not a callable factory"),
    (["--model", "usermodels:returns_int"], "expected an ampkit.Workload or a torch.nn.Module"),
    (["--model", "usermodels:bare"], "--input-shape"),
    (["--model", "usermodels"], "MODULE:FACTORY"),
    (["--batch-size", "-4"], "--batch-size must be a positive integer"),
    (["--batch-size", "many"], "--batch-size must be a positive integer"),
    (["--batch-size", "auto", "--memory-budget", "lots"], "cannot read memory size 'lots'"),
    (["--batch-size", "auto"], "needs --memory-budget"),
    (["--input-shape", "3,x", "--model", "usermodels:bare"], "--input-shape"),
    (["--steps", "0"], "--steps must be >= 1"),
    (["--model", "usermodels:bare", "--input-shape", "3,2,2"], "failed a training step on a probe batch"),
    (["--json", "/no/such/dir/b.json"], "does not exist"),
])
def test_bad_input_exit_2_one_line(user_dir, args, needle):
    assert_usage_error(bench(*args, timeout=120), needle)


def test_parse_size_and_peaks():
    assert parse_size("8GiB") == 8 * 2**30 and parse_size("512MiB") == 512 * 2**20
    assert parse_size("2GB") == 2 * 10**9 and parse_size("1000") == 1000 and parse_size("1.5k") == 1536
    for bad in ("", "GiB", "-1GiB", "3 parsecs"):
        with pytest.raises(UsageError):
            parse_size(bad)
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == 989.4
    assert peak_tflops("NVIDIA H100 PCIe", "bf16") == 756.0
    assert peak_tflops("NVIDIA A10G", "fp16") == 125.0 and peak_tflops("NVIDIA A100-SXM4-80GB", "fp16") == 312.0
    assert peak_tflops("NVIDIA L4", "tf32") == 60.0 and peak_tflops("NVIDIA L40S", "tf32") == 183.0
    assert peak_tflops("Tesla T4", "bf16") is None and peak_tflops("AMD EPYC", "fp32") is None


# ---------------------------------------------------------------- interruption, torchrun
def test_ctrl_c_keeps_finished_rows(user_dir, tmp_path):
    out = tmp_path / "partial.json"
    proc = subprocess.Popen([sys.executable, "-m", "ampkit", "bench", "--device", "cpu", "--model",
                             "usermodels:sleeps_in_fp16", "--input-shape", "16", "--num-classes", "4",
                             "--modes", "fp32,fp16", "--batch-size", "8", "--steps", "20", "--warmup", "1",
                             "--json", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=default_sigint)
    deadline = time.time() + 240
    seen = ""
    while time.time() < deadline:
        line = proc.stderr.readline()  # the progress lines (not a terminal)
        seen += line
        if "fp16: warm-up done" in line or re.search(r"fp16: step 1/\d+ done", line) or not line:
            break
    assert "fp16: " in seen, seen
    # the rounds: fp16's first timed step starts once fp32's first block is done; it sleeps in its own
    timed = user_dir / "fp16_timed.log"
    while time.time() < deadline and not timed.exists() and proc.poll() is None:
        time.sleep(0.05)
    assert timed.exists() and proc.poll() is None, proc.stderr.read()
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole process group
    out_text, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "fp32: ok" in out_text  # with --json PATH the human output is on stdout
    doc = json.loads(out.read_text())
    assert doc["interrupted"] is True
    assert [r["mode"] for r in doc["results"]] == ["fp32"] and doc["results"][0]["status"] == "ok"


def test_torchrun_two_processes_report_world_size_2(tmp_path):
    out = tmp_path / "ddp.json"
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                        "-m", "ampkit", "bench", "--device", "cpu", "--workload", "mlp", "--modes", "fp32,bf16",
                        "--batch-size", "8", "--steps", "3", "--warmup", "1", "--json", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["world_size"] == 2
    for row in doc["results"]:
        assert row["status"] == "ok" and row["batch_size"] == 8 and row["samples_per_s"] > 0
