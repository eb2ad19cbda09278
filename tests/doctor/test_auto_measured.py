"""``auto`` follows the measurement (issue 20): the doctor's cached verdict, else a quick check on
this machine, else a capability guess labelled as one; and capability reasons never claim speed.

Every test points ``AMPKIT_CACHE_DIR`` at its own tmp_path, so nothing here reads or writes the
suite's cache (tests/conftest.py) or a developer's real one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch
import torch.nn as nn

import ampkit
from ampkit import auto as doctor_auto
from ampkit import auto_cache
from ampkit.backends.torch import devices, doctor_ops
from ampkit.cpu import cpu_emulation_note, cpu_mode_support
from ampkit.doctor.verdicts import ACCEL_THRESHOLD, TRAINING_GAIN, evaluate
from ampkit.rounds import Plan
from ampkit.stats import ratio_text

CPU = torch.device("cpu")
SLOWER = {"bf16": {"verdict": "slower", "speedup": 0.55, "speedup_ci": [0.5, 0.6], "training_speedup": 0.7,
                   "training_speedup_ci": [0.65, 0.75]},
          "fp16": {"verdict": "slower", "speedup": 0.06, "speedup_ci": [0.05, 0.07]}}
FASTER = {"bf16": {"verdict": "recommended", "speedup": 1.9, "speedup_ci": [1.8, 2.0], "training_speedup": 1.5,
                   "training_speedup_ci": [1.4, 1.6]}}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(auto_cache.ENV_VAR, str(tmp_path))
    return tmp_path


@pytest.fixture
def no_quick(monkeypatch):
    """The quick check must not run (a cached verdict is there to be used)."""
    def refuse(device):
        raise AssertionError("the quick check ran although a verdict was cached")
    monkeypatch.setattr(doctor_ops, "quick_auto", refuse)


def plant(folder, fp: dict, recommended: str, modes: dict, *, source: str = "doctor", key: str | None = None,
          measured_at: str = "2025-06-01T12:00:00+00:00") -> None:
    """Write the cache file by hand (not through auto_cache.store): the on-disk format is the contract."""
    path = folder / auto_cache.FILE_NAME
    doc = json.loads(path.read_text()) if path.exists() else {"schema": auto_cache.SCHEMA, "entries": {}}
    doc["entries"][key or auto_cache.key(fp)] = {
        "fingerprint": fp, "recommended": recommended, "source": source, "measured_at": measured_at,
        "reason": "planted by the test", "kernels_label": "matmul/conv", "modes": modes}
    path.write_text(json.dumps(doc))


def cpu_fp() -> dict:
    return devices.auto_fingerprint(CPU)


# ---------------------------------------------------------------- (a) (b) a planted doctor verdict
def test_planted_doctor_verdict_bf16_slower_gives_fp32_and_quotes_the_measurement(cache, no_quick):
    plant(cache, cpu_fp(), "fp32", SLOWER)
    mp = ampkit.MixedPrecision("auto", device="cpu")
    assert mp.mode == "fp32"
    assert "the doctor measured bf16 matmul/conv 0.55x, training step 0.70x fp32" in mp.reason, mp.reason
    assert "on this CPU (cached 2025-06-01)" in mp.reason and mp.reason.endswith(": fp32")
    assert "capability" not in mp.reason


def test_planted_doctor_verdict_bf16_faster_gives_bf16(cache, no_quick):
    plant(cache, cpu_fp(), "bf16", FASTER)
    mp = ampkit.MixedPrecision("auto", device="cpu")
    assert mp.mode == "bf16" and "the doctor measured bf16 matmul/conv 1.90x" in mp.reason and mp.reason.endswith(": bf16")


def test_a_recorded_choice_that_measured_slower_is_never_followed(cache, no_quick):
    plant(cache, cpu_fp(), "bf16", SLOWER)  # an inconsistent (hand-edited) entry
    mode, reason = devices.resolve_auto(CPU)
    assert mode == "fp32" and "measured slower, so fp32" in reason


def test_the_doctor_writes_its_verdict_and_auto_follows_it(cache):
    from ampkit.doctor import driver

    report = driver.run("cpu", "torch", modes=("fp32", "bf16"))
    assert report.auto_cache == str(cache / auto_cache.FILE_NAME)
    entry = auto_cache.load(cpu_fp())
    assert entry["source"] == "doctor" and entry["recommended"] == report.recommended
    bf16 = report.modes["bf16"]
    assert entry["modes"]["bf16"]["speedup"] == bf16.speedup
    mp = ampkit.MixedPrecision("auto", device="cpu")
    assert mp.mode == report.recommended  # auto never contradicts the doctor
    assert f"the doctor measured bf16 matmul/conv {ratio_text(bf16.speedup)}x" in mp.reason
    if bf16.verdict == "slower":
        assert mp.mode == "fp32"


def test_doctor_quick_measures_nothing_and_caches_nothing(cache):
    from ampkit.doctor import run_doctor

    report = run_doctor("torch", "cpu", quick=True)
    assert report.auto_cache is None and not (cache / auto_cache.FILE_NAME).exists()


@pytest.mark.slow  # a bench child process: ~10 s on a 2-core CPU
def test_bench_modes_fp32_auto_runs_fp32_once_for_auto_when_the_doctor_measured_bf16_slower(cache):
    plant(cache, cpu_fp(), "fp32", SLOWER)
    r = subprocess.run([sys.executable, "-m", "ampkit", "bench", "--framework", "torch", "--device", "cpu",
                        "--workload", "mlp", "--modes", "fp32,auto", "--steps", "1", "--warmup", "1", "--json", "-"],
                       capture_output=True, text=True, timeout=300, env={**os.environ, auto_cache.ENV_VAR: str(cache)})
    assert r.returncode == 0, r.stderr[-3000:]
    rows = json.loads(r.stdout)["results"]
    assert [row["mode"] for row in rows] == ["fp32"]  # auto chose fp32, which runs once
    assert rows[0]["resolved_from"] == "auto" and "the doctor measured bf16" in rows[0]["resolved_reason"]


def test_audit_auto_note_quotes_the_measurement(cache, no_quick):
    plant(cache, cpu_fp(), "fp32", SLOWER)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, 6, generator=g), torch.randint(0, 2, (8,), generator=g)
    rep = ampkit.audit(nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2)), (x, y), mode="auto", device="cpu")
    assert rep.resolved_from == "auto" and rep.mode == "bf16"  # fp32 chosen: audit bf16 instead, and say so
    assert "auto resolves to fp32" in rep.note and "the doctor measured bf16" in rep.note


# ---------------------------------------------------------------- (c) nothing cached: measure now
def _matmul_ratio(n: int = 256, rounds: int = 5) -> float:
    """This test's own look at the machine: median of interleaved fp32/bf16 matmul time ratios."""
    a32, b32 = torch.randn(n, n), torch.randn(n, n)
    a16, b16 = a32.bfloat16(), b32.bfloat16()
    torch.mm(a32, b32), torch.mm(a16, b16)
    ratios = []
    with doctor_ops.measuring_threads(CPU):
        for _ in range(rounds):
            t = time.perf_counter()
            torch.mm(a32, b32)
            t32 = time.perf_counter() - t
            t = time.perf_counter()
            torch.mm(a16, b16)
            ratios.append(t32 / (time.perf_counter() - t))
    return sorted(ratios)[rounds // 2]


def test_without_a_cache_auto_measures_here_caches_it_and_agrees_with_the_measurement(cache, monkeypatch):
    calls = []
    real = doctor_ops.quick_auto
    monkeypatch.setattr(doctor_ops, "quick_auto", lambda device: calls.append(device) or real(device))
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    t0 = time.perf_counter()
    mp = ampkit.MixedPrecision("auto", device="cpu")
    took = time.perf_counter() - t0
    assert torch.equal(torch.rand(1), expected_next)  # the check left the caller's random state alone
    assert len(calls) == 1 and took < 10, took  # ~1 s here; generous for a loaded 2-core machine
    entry = auto_cache.load(cpu_fp())
    assert entry is not None and entry["source"] == "quick" and entry["recommended"] == mp.mode
    bf16 = entry["modes"]["bf16"]
    faster_matmul = bf16["speedup_ci"][0] >= ACCEL_THRESHOLD
    trains_faster = bf16.get("training_speedup") is not None and bf16["training_speedup"] >= TRAINING_GAIN
    assert mp.mode == ("bf16" if faster_matmul and trains_faster else "fp32"), entry
    assert f"a quick check measured bf16 matmul {ratio_text(bf16['speedup'])}x" in mp.reason and "just now" in mp.reason
    # and the machine agrees: a bf16 matmul this test itself sees clearly slower is never chosen
    ratio = _matmul_ratio()
    if ratio < 0.7:
        assert mp.mode == "fp32" and bf16["speedup"] < 1, (ratio, entry)
    if ratio > 1.5:
        assert bf16["speedup"] > 1, (ratio, entry)
    # the next resolution reads the cache: no second measurement, the same answer, said to be cached
    again = ampkit.MixedPrecision("auto", device="cpu")
    assert len(calls) == 1 and again.mode == mp.mode and "cached" in again.reason


def test_the_quick_check_leaves_the_rounds_early_for_a_many_times_slower_mode():
    """fp16 matmuls on a CPU without AVX512-FP16 stand in for an emulated bf16: the check stays short."""
    from ampkit.cpu import cpu_has_fast_fp16

    if cpu_has_fast_fp16():
        pytest.skip("this CPU has fp16 instructions: no emulated mode to time")
    t0 = time.perf_counter()
    with doctor_ops.measuring_threads(CPU):
        entry = doctor_auto.quick_check(lambda m: doctor_ops.quick_kernel_work(m, CPU), None, mode="fp16")
    assert time.perf_counter() - t0 < 5
    fp16 = entry["modes"]["fp16"]
    if fp16["speedup_ci"][1] < 1 / ACCEL_THRESHOLD:
        assert entry["recommended"] == "fp32" and fp16["verdict"] == "slower" and "slower" in entry["reason"]


# ---------------------------------------------------------------- (d) foreign and corrupt caches
CANNED = {"recommended": "fp32", "reason": "canned", "source": "quick", "kernels_label": "matmul",
          "modes": {"bf16": {"speedup": 0.5, "speedup_ci": [0.45, 0.55], "verdict": "slower"}}}


@pytest.fixture
def canned_quick(monkeypatch):
    calls = []
    monkeypatch.setattr(doctor_ops, "quick_auto", lambda device: calls.append(device) or dict(CANNED))
    return calls


@pytest.mark.parametrize("field,value", [("cpu_model", "Some Other CPU"), ("framework_version", "0.0.1"),
                                         ("cpu_features", ["avx2"])])
def test_a_verdict_for_another_environment_is_ignored(cache, canned_quick, field, value):
    other = dict(cpu_fp(), **{field: value})
    plant(cache, other, "bf16", FASTER)                                   # under its own key
    plant(cache, other, "bf16", FASTER, key=auto_cache.key(cpu_fp()))     # even under this environment's key
    mode, reason = devices.resolve_auto(CPU)
    assert canned_quick == [CPU] and mode == "fp32" and "a quick check measured bf16 matmul 0.50x" in reason


@pytest.mark.parametrize("content", [
    "{not json", "", "[]", '{"schema": 1, "entries": []}', '{"schema": 99, "entries": {}}', "\x00\x01binary",
])
def test_a_corrupt_cache_file_is_ignored_and_replaced(cache, canned_quick, content):
    (cache / auto_cache.FILE_NAME).write_text(content)
    mode, reason = devices.resolve_auto(CPU)
    assert canned_quick == [CPU] and mode == "fp32" and "quick check" in reason
    doc = json.loads((cache / auto_cache.FILE_NAME).read_text())  # rewritten whole, valid
    assert auto_cache.key(cpu_fp()) in doc["entries"]


@pytest.mark.parametrize("bad", [{"recommended": "fp99"}, {"recommended": "fp8"}, {"source": "oracle"},
                                 {"measured_at": 12}, {"modes": {"bf16": {"speedup": "fast"}}},
                                 {"modes": {"bf16": {"speedup": -1.0}}}, {"modes": {"bf16": {"speedup_ci": [1]}}},
                                 {"modes": []}])
def test_a_malformed_entry_is_ignored(cache, canned_quick, bad):
    plant(cache, cpu_fp(), "bf16", FASTER)
    doc = json.loads((cache / auto_cache.FILE_NAME).read_text())
    doc["entries"][auto_cache.key(cpu_fp())].update(bad)
    (cache / auto_cache.FILE_NAME).write_text(json.dumps(doc))
    assert devices.resolve_auto(CPU)[0] == "fp32" and canned_quick == [CPU]


def test_the_cli_survives_a_corrupt_cache(cache):
    (cache / auto_cache.FILE_NAME).write_text("{ corrupt")
    code = ("import ampkit, torch; from ampkit.backends.torch import doctor_ops\n"
            "doctor_ops.quick_auto = lambda d: {'recommended': 'fp32', 'reason': 'r', 'source': 'quick', 'modes': {}}\n"
            "mp = ampkit.MixedPrecision('auto', device='cpu'); print(mp.mode)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, auto_cache.ENV_VAR: str(cache)})
    assert r.returncode == 0 and r.stdout.strip() == "fp32" and "Traceback" not in r.stderr, r.stderr


def test_an_unwritable_cache_still_resolves_and_measures_once_per_process(tmp_path, monkeypatch, canned_quick):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(auto_cache.ENV_VAR, str(blocker / "cache"))  # mkdir fails: a file is in the way
    assert devices.resolve_auto(CPU)[0] == "fp32"
    assert devices.resolve_auto(CPU)[0] == "fp32"
    assert canned_quick == [CPU]


def test_store_is_atomic_json_and_keeps_other_environments(cache):
    other = dict(cpu_fp(), framework_version="0.0.1")
    assert auto_cache.store(other, dict(CANNED)) == cache / auto_cache.FILE_NAME
    assert auto_cache.store(cpu_fp(), dict(CANNED, recommended="bf16")) is not None
    doc = json.loads((cache / auto_cache.FILE_NAME).read_text())
    assert set(doc["entries"]) == {auto_cache.key(other), auto_cache.key(cpu_fp())}
    assert [p.name for p in cache.iterdir()] == [auto_cache.FILE_NAME]  # no temporary file left behind
    assert auto_cache.load(cpu_fp())["recommended"] == "bf16" and auto_cache.load(other)["recommended"] == "fp32"


# ---------------------------------------------------------------- where nothing can be measured cheaply
def _fake_gpu(monkeypatch, cc=(8, 0), name="NVIDIA A100"):
    monkeypatch.setattr(devices, "cuda_capability", lambda d: cc)
    monkeypatch.setattr(devices, "_cuda_bf16_native", lambda d: cc >= (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: name)


def test_a_gpu_without_a_measurement_is_a_labelled_capability_guess(cache, monkeypatch, no_quick):
    _fake_gpu(monkeypatch)
    mode, reason = devices.resolve_auto(torch.device("cuda:0"))
    assert mode == "bf16" and reason.startswith("capability guess (") and "run `ampkit doctor` to measure" in reason


def test_a_gpu_follows_the_doctors_cached_verdict(cache, monkeypatch, no_quick):
    _fake_gpu(monkeypatch)
    gpu = torch.device("cuda:0")
    plant(cache, devices.auto_fingerprint(gpu), "fp16",
          {"fp16": {"verdict": "recommended", "speedup": 3.1, "training_speedup": 2.2},
           "bf16": {"verdict": "usable", "speedup": 1.02, "training_speedup": 1.0}})
    mode, reason = devices.resolve_auto(gpu)
    assert mode == "fp16" and "the doctor measured" in reason and "on NVIDIA A100 (cuda:0)" in reason
    _fake_gpu(monkeypatch, name="NVIDIA H100")  # another GPU: another environment, back to the labelled guess
    assert devices.resolve_auto(gpu)[1].startswith("capability guess")


# ---------------------------------------------------------------- reasons never contradict the measurement
def test_capability_reasons_claim_no_speed(monkeypatch):
    for mode in ("bf16", "fp16"):
        ok, why = cpu_mode_support(mode, "CPU autocast")
        assert ok and "native" not in why and "fast" not in why
    has = {"avx512_fp16": True, "avx512_bf16": True}
    assert cpu_emulation_note("fp16", has) == " although this CPU has AVX512-FP16 instructions (no AMX-FP16)"
    assert cpu_emulation_note("bf16", {"avx2": True}) == ": this CPU has no AVX512-BF16 or AMX-BF16, so bf16 is emulated"


def test_the_doctor_says_slower_with_the_measured_figures_even_on_a_cpu_with_the_instructions():
    """The doctor's fp16 row on a CPU that has AVX512-FP16 but measures fp16 slower: the capability,
    then the measured fact, and nothing that reads as "native" or fast."""
    from test_verdicts_planted import make_work_for

    work_for = make_work_for({"fp16": (0.2, 0.2)}, noise=0.0)  # fp16 5x slower, kernels and training
    has_fp16 = {"avx512_fp16": True}
    reports, recommended, _ = evaluate(["fp32", "fp16"], lambda m: cpu_mode_support(m, "CPU autocast"),
                                       lambda m: ("pass", "planted"), work_for, quick=False,
                                       emulation_note=lambda m: cpu_emulation_note(m, has_fp16), plan=Plan(max_rounds=3))
    fp16 = reports["fp16"]
    assert fp16.verdict == "slower" and recommended == "fp32"
    assert fp16.reason.startswith("fp16 is slower than fp32 here although this CPU has AVX512-FP16 instructions "
                                  "(no AMX-FP16): ")
    assert "5.0x slower than fp32" in fp16.reason and "native" not in fp16.reason


# ---------------------------------------------------------------- Keras (TensorFlow in a fresh interpreter)
_TF_CASE = textwrap.dedent('''
    import json, os, pathlib, sys
    from ampkit import auto_cache
    from ampkit.backends.tensorflow.engine.mixed_precision import auto_fingerprint
    import ampkit.keras as ak

    folder = pathlib.Path(os.environ["AMPKIT_CACHE_DIR"])
    fp = auto_fingerprint()
    out = {"fp": fp}

    def plant(recommended, modes, entry_fp=fp):
        doc = {"schema": 1, "entries": {auto_cache.key(fp): {
            "fingerprint": entry_fp, "recommended": recommended, "source": "doctor",
            "measured_at": "2025-06-01T12:00:00+00:00", "reason": "planted", "modes": modes}}}
        (folder / "auto.json").write_text(json.dumps(doc))

    plant("fp32", json.loads(sys.argv[1]))
    mp = ak.MixedPrecision("auto")
    out["slower"] = [mp.mode, mp.reason]
    plant("bf16", json.loads(sys.argv[2]))
    mp = ak.MixedPrecision("auto")
    out["faster"] = [mp.mode, mp.reason]
    plant("bf16", json.loads(sys.argv[2]), entry_fp=dict(fp, cpu_model="another CPU"))
    mp = ak.MixedPrecision("auto")   # a foreign entry: the quick check runs here and is cached
    out["measured"] = [mp.mode, mp.reason, auto_cache.load(fp)]
    print("RESULT " + json.dumps(out))
''')


@pytest.mark.tensorflow
def test_keras_auto_follows_the_cached_verdict_and_else_measures(tmp_path):
    r = subprocess.run([sys.executable, "-c", _TF_CASE, json.dumps(SLOWER), json.dumps(FASTER)],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, auto_cache.ENV_VAR: str(tmp_path), "CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(next(line for line in r.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert out["fp"]["framework"] == "tensorflow" and out["fp"]["device"] == "cpu"
    mode, reason = out["slower"]
    assert mode == "fp32" and "the doctor measured bf16 matmul/conv 0.55x" in reason and "cached 2025-06-01" in reason
    mode, reason = out["faster"]
    assert mode == "bf16" and "the doctor measured bf16 matmul/conv 1.90x" in reason
    mode, reason, entry = out["measured"]
    assert entry["source"] == "quick" and entry["recommended"] == mode and "a quick check measured bf16 matmul" in reason
    low = entry["modes"]["bf16"]["speedup_ci"][0]
    assert mode == ("bf16" if low >= ACCEL_THRESHOLD else "fp32"), entry


@pytest.mark.tensorflow
@pytest.mark.slow  # TensorFlow twice and a bench child: ~20 s on a 2-core CPU
def test_keras_bench_modes_fp32_auto_follows_the_cached_verdict(tmp_path):
    env = {**os.environ, auto_cache.ENV_VAR: str(tmp_path), "CUDA_VISIBLE_DEVICES": ""}
    fp = subprocess.run([sys.executable, "-c", "import json; from ampkit.backends.tensorflow.engine.mixed_precision import "
                         "auto_fingerprint as f; print('FP ' + json.dumps(f(cpu=True)))"],
                        capture_output=True, text=True, timeout=300, env=env)
    assert fp.returncode == 0, fp.stderr[-3000:]
    plant(tmp_path, json.loads(next(x for x in fp.stdout.splitlines() if x.startswith("FP "))[3:]), "fp32", SLOWER)
    r = subprocess.run([sys.executable, "-m", "ampkit", "bench", "--framework", "tensorflow", "--device", "cpu",
                        "--workload", "mlp", "--modes", "fp32,auto", "--steps", "1", "--warmup", "1", "--json", "-"],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = json.loads(r.stdout)["results"]
    assert [row["mode"] for row in rows] == ["fp32"]
    assert rows[0]["resolved_from"] == "auto" and "the doctor measured bf16" in rows[0]["resolved_reason"]


def test_a_keras_reason_names_the_doctor_run_that_measures_keras():
    from ampkit.cpu import labelled_guess

    entry = dict(CANNED, modes={"bf16": {"verdict": "recommended", "speedup": 1.9, "speedup_ci": [1.8, 2.0]}},
                 recommended="bf16", measured_at="2026-12-01T00:00:00", fingerprint={"framework": "tensorflow"})
    assert "`ampkit doctor --framework tensorflow` measures" in doctor_auto.choose(entry, "this CPU")[1]
    assert "`ampkit doctor` measures" in doctor_auto.choose(dict(entry, fingerprint={"framework": "torch"}), "this CPU")[1]
    assert "run `ampkit doctor --framework tensorflow` to measure" in labelled_guess("bf16", "why", "tensorflow")[1]
