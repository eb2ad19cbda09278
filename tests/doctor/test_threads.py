"""Issue 45 points 2 and 3: one thread policy for doctor and bench, and a --quick doctor that never
contradicts a measurement.

The thread count: checked once (0, -1, "x", more than the CPUs are one line, exit 2), applied by
the doctor's session and in each bench child (bench_threads), read back into
``environment.cpu.threads`` and recorded in the doctor's cache entry; ``auto`` says so when it
follows a verdict measured at another count. --quick: the cached measured verdict (dated, with its
thread count), else ``recommended: null`` and "not measured"."""

from __future__ import annotations

import contextlib
import json
import os

import pytest
import torch

import ampkit
from ampkit import auto_cache, threads
from ampkit.backends.torch.devices import auto_fingerprint
from ampkit.bench.config import BenchConfig
from ampkit.bench.ops import BenchOps, MeasureRequest
from ampkit.bench.runner import measure_mode
from ampkit.cli.main import main
from ampkit.errors import ModeUnavailableError, UsageError
from ampkit.registry import get_backend
from ampkit.target import Target

CPU = torch.device("cpu")
FASTER = {"fp32": {"verdict": "usable", "speedup": 1.0, "speedup_ci": [1.0, 1.0], "training_speedup": 1.0},
          "bf16": {"verdict": "recommended", "speedup": 2.7, "speedup_ci": [2.4, 3.2], "training_speedup": 1.25,
                   "training_speedup_ci": [1.1, 1.4]}}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(auto_cache.ENV_VAR, str(tmp_path))
    return tmp_path


def _plant(threads_at=1, recommended="bf16"):
    entry = {"recommended": recommended, "reason": "planted", "source": "doctor", "kernels_label": "matmul/conv",
             "modes": FASTER, "threads": threads_at, "measured_at": "2026-11-30T08:00:00+00:00"}
    assert auto_cache.store(auto_fingerprint(CPU), entry) is not None


# ---------------------------------------------------------------- the count, checked once
@pytest.mark.parametrize("value", ["0", "-1", "x", "1.5", str(threads.cpu_limit() + 1)])
@pytest.mark.parametrize("command", ["doctor", "bench"])
def test_bad_thread_counts_are_one_line_and_exit_2(command, value, capsys):
    assert main([command, f"--threads={value}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("ampkit: error: --threads must be a whole number from 1 to "), err


@pytest.mark.parametrize("value", [0, -1, "x", True, 2.0, threads.cpu_limit() + 1])
def test_the_library_refuses_the_same_values(value):
    with pytest.raises(UsageError, match="--threads must be a whole number from 1 to"):
        ampkit.doctor("torch", "cpu", threads=value, progress=False)
    with pytest.raises(UsageError, match="--threads must be a whole number from 1 to"):
        BenchConfig(threads=value)


def test_the_default_is_one_cpu_thread_for_both_and_none_on_a_gpu():
    assert threads.resolve(None, accelerator=False) == threads.DEFAULT_CPU == 1
    assert threads.resolve(None, accelerator=True) is None and threads.resolve(2, accelerator=True) == 2
    assert BenchConfig().threads is None and BenchConfig(threads="1").threads == 1


# ---------------------------------------------------------------- applied where it times
def test_torch_applies_the_count_inside_the_scope_and_restores_it():
    backend, before = get_backend("torch"), torch.get_num_threads()
    target = backend.target("cpu")
    for n in {1, threads.cpu_limit()}:
        with backend.bench_threads(target, n):
            assert torch.get_num_threads() == n
        assert torch.get_num_threads() == before
        with backend.doctor_session(target, n):
            assert torch.get_num_threads() == n
        assert torch.get_num_threads() == before
    with backend.bench_threads(target, None):  # a GPU run nobody asked a count for: unchanged
        assert torch.get_num_threads() == before


class _Recording(BenchOps):
    bench_searches_in_child = True

    def __init__(self):
        self.seen = []

    @contextlib.contextmanager
    def bench_threads(self, target, n):
        self.seen.append(("scope", n))
        yield

    def bench_open(self, request):
        self.seen.append(("measure", request.config.threads))
        raise ModeUnavailableError("nothing to measure here")  # the session's failure is the row's status


def test_the_child_measures_inside_the_configs_thread_scope():
    backend = _Recording()
    measure_mode(backend, MeasureRequest(BenchConfig(threads=1), "fp32", Target("cpu", False, "cpu")), None)
    assert backend.seen == [("scope", 1), ("measure", 1)]


def test_the_doctor_records_the_count_in_its_document_and_cache(cache):
    n = threads.cpu_limit()
    report = ampkit.doctor("torch", "cpu", threads=n, progress=False, quick=False)
    assert report.environment["cpu"]["threads"] == n
    entry = auto_cache.load(auto_fingerprint(CPU))
    assert entry["threads"] == n and entry["source"] == "doctor"
    quick = ampkit.doctor("torch", "cpu", quick=True, progress=False)
    assert quick.recommended == entry["recommended"]
    assert f"on {threads.words(n)}" in quick.reason and entry["measured_at"][:10] in quick.reason


def test_auto_says_when_it_follows_a_verdict_measured_at_another_count(cache):
    _plant(threads_at=1)
    backend = get_backend("torch")
    target = backend.target("cpu")
    with backend.bench_threads(target, 1):
        mode, why = backend.resolve_auto(target)
    assert mode == "bf16" and "(cached 2026-11-30, on 1 thread)" in why
    if threads.cpu_limit() > 1:
        with backend.bench_threads(target, 2):
            _mode, why = backend.resolve_auto(target)
        assert "on 1 thread, while this process runs 2 threads (`ampkit doctor --threads 2` measures at that count)" in why


# ---------------------------------------------------------------- --quick never contradicts a measurement
def test_quick_with_a_cached_measurement_reports_it_dated_with_its_count(cache, capsys):
    _plant(threads_at=1)
    assert main(["doctor", "--framework", "torch", "--device", "cpu", "--quick", "--json", "-"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["recommended"] == "bf16" and doc["modes"]["bf16"]["verdict"] == "recommended"
    assert doc["reason"].startswith("cached measurement (--quick times nothing): the doctor measured bf16 matmul/conv "
                                    "2.70x, training step 1.25x fp32 on this CPU (cached 2026-11-30, on 1 thread): bf16")
    assert "recommended: bf16" in " ".join(err.split())


def test_quick_with_an_empty_cache_recommends_nothing_and_says_not_measured(cache, capsys):
    assert main(["doctor", "--framework", "torch", "--device", "cpu", "--quick", "--json", "-"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["recommended"] is None and doc["reason"].startswith("not measured")
    assert not [m for m, r in doc["modes"].items() if r["verdict"] == "recommended"]
    assert "recommended: none — not measured" in " ".join(err.split())
    from ampkit.doctor.report import DoctorReport

    assert DoctorReport.from_dict(doc).recommended is None  # the document reads back


@pytest.mark.parametrize("n", sorted({1, threads.cpu_limit()}))
def test_every_interleaved_mode_times_at_the_count_it_reports(n, tmp_path, monkeypatch):
    """The count is read inside each mode's live child, during its timed blocks (the row's ``threads``),
    not copied from the config: each interleaved child once restored the machine's default count right
    after entering its scope, so every mode timed on all CPUs while the document said 1."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny45.py").write_text("import torch.nn as nn\n\n\ndef net():\n"
                                        "    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))\n")
    report = ampkit.bench(model="tiny45:net", input_shape=[8], num_classes=4, modes="fp32,bf16", batch_size=4,
                          steps=4, warmup=1, framework="torch", device="cpu", threads=n)
    assert report.pairing == "interleaved" and report.environment["cpu"]["threads"] == n
    assert [(r.mode, r.status, r.threads) for r in report.results] == [("fp32", "ok", n), ("bf16", "ok", n)]
    # every mode's process on the same n CPUs, read in each (#45: left to the scheduler one mode stayed on
    # a busier CPU for a whole run); all of them at every CPU; this process's own set as it was
    allowed = sorted(os.sched_getaffinity(0))
    held = report.results[0].cpus
    assert [r.cpus for r in report.results] == [held] * 2 and len(held) == n and set(held) <= set(allowed)
    assert sorted(os.sched_getaffinity(0)) == allowed
    cpus = ", ".join(map(str, held))
    assert f"every mode's process ran on CPU{'s' if n > 1 else ''} {cpus}, the same for all" in threads.clock_words(report.results)[0]


def test_the_timing_cpus_start_at_this_processes_own_and_wrap(monkeypatch):
    """n CPUs from the one this process runs on, then the next allowed ones, wrapping: two benches
    started side by side land where the scheduler put them, not both on one fixed CPU; none when n
    covers every CPU or no count is given (a GPU); the last n when the current CPU is unknown."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2, 4, 6})
    monkeypatch.setattr(threads, "current_cpu", lambda: 4)
    assert threads.timing_cpus(1) == {4} and threads.timing_cpus(3) == {4, 6, 0}
    assert threads.timing_cpus(4) is None and threads.timing_cpus(None) is None
    monkeypatch.setattr(threads, "current_cpu", lambda: None)
    assert threads.timing_cpus(2) == {4, 6}
    monkeypatch.undo()
    assert threads.current_cpu() in os.sched_getaffinity(0)
