"""A third framework is one folder: the NumPy backend written in the test suite (tests/numpy_backend.py)
runs doctor, bench, parity and audit end to end through the neutral drivers, from the CLI (bench's
modes and the audit in child processes, which load the backend by its spec) and from the library."""

from __future__ import annotations

import json

import pytest

from ampkit.backends import base
from ampkit.cli.main import main
from ampkit.registry import get_backend, register_backend

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.fixture(autouse=True)
def numpy_framework():
    register_backend("numpy", "numpy_backend:NumpyBackend")


def _cli(tmp_path, *args) -> tuple[int, dict]:
    out = tmp_path / f"{args[0]}.json"
    rc = main([*args, "--framework", "numpy", "--json", str(out)])
    return rc, json.loads(out.read_text())


def test_the_numpy_backend_implements_the_whole_protocol():
    backend = get_backend("numpy")
    assert isinstance(backend, base.Backend) and backend.name == "numpy"
    assert type(backend).__module__ == "numpy_backend"


def test_doctor_from_the_cli(tmp_path):
    rc, doc = _cli(tmp_path, "doctor", "--quick")
    assert rc == 0 and doc["command"] == "doctor" and doc["framework"] == "numpy"
    modes = doc["modes"]
    assert modes["fp16"]["supported"] and modes["fp16"]["selftest"] == "pass", modes["fp16"]
    assert "float16" in modes["fp16"]["selftest_detail"]
    assert not modes["bf16"]["supported"] and "NumPy has no bf16" in modes["bf16"]["reason"]


def test_doctor_from_the_library_measures_fp16_against_fp32():
    from ampkit.doctor import run_doctor

    report = run_doctor("numpy", "cpu")
    fp16 = report.modes["fp16"]
    assert report.framework == "numpy" and fp16.selftest == "pass"
    assert fp16.speedup is not None and fp16.speedup > 0, fp16  # measured in interleaved rounds


def test_bench_from_the_cli_runs_each_mode_in_a_child(tmp_path):
    rc, doc = _cli(tmp_path, "bench", "--modes", "fp32,fp16,bf16", "--steps", "3", "--warmup", "1")
    assert rc == 0, doc
    rows = {r["mode"]: r for r in doc["results"]}
    assert doc["workload"] == "mlp" and doc["environment"]["framework"] == "numpy"
    assert rows["fp32"]["status"] == rows["fp16"]["status"] == "ok"
    assert rows["bf16"]["status"] == "unsupported" and "NumPy has no bf16" in rows["bf16"]["error"]
    assert rows["fp16"]["speedup_vs_fp32"] > 0 and len(rows["fp16"]["step_times_ms"]) == 3
    assert "no --workload given" in doc["note"]


def test_bench_from_the_library():
    import ampkit

    report = ampkit.bench(modes="fp32,auto", steps=2, warmup=0, framework="numpy")
    assert [r.mode for r in report.results] == ["fp32"]
    assert report.results[0].resolved_from == "auto" and report.results[0].status == "ok"


def test_parity_from_the_cli(tmp_path):
    rc, doc = _cli(tmp_path, "parity", "--modes", "fp32,fp16", "--seeds", "2", "--epochs", "2")
    results = {r["mode"]: r for r in doc["results"]}
    assert doc["dataset"] == "digits" and set(results) == {"fp32", "fp16"}
    assert results["fp32"]["metric"]["mean"] > 0.5  # the NumPy MLP learns the digits
    assert abs(results["fp16"]["delta_vs_fp32"]) < 0.1 and rc == (1 if results["fp16"]["verdict"] == "fail" else 0)


def test_parity_from_the_library():
    from ampkit.parity.config import ParityConfig
    from ampkit.parity.driver import run

    report = run(ParityConfig(modes="fp32,fp16", seeds=1, epochs=1), "numpy")
    assert [r.mode for r in report.results] == ["fp32", "fp16"] and report.results[1].seeds == [0]


def test_audit_from_the_cli_runs_in_a_child(tmp_path):
    rc, doc = _cli(tmp_path, "audit", "--mode", "fp16", "--steps", "2")
    assert rc == 0 and doc["framework"] == "numpy" and doc["steps_completed"] == 2
    layers = {lay["name"]: lay for lay in doc["layers"]}
    assert list(layers) == ["fc1", "relu", "fc2"] and layers["fc2"]["fwd_dtype"] == "float16"
    assert 0 < layers["fc2"]["rel_error"] < 0.01 and doc["first_nonfinite"] is None


def test_audit_from_the_library_finds_an_overflowing_loss_scale():
    from ampkit.audit.config import AuditConfig
    from ampkit.audit.driver import audit_here

    report = audit_here(AuditConfig(mode="fp16", loss_scale=1e9, device="cpu"), get_backend("numpy"))
    assert report.first_nonfinite == {"name": "fc2", "phase": "backward", "step": 0, "op": None,
                                       "in_reference": False}
    assert report.failed and any(f.kind in ("nonfinite", "overflow") for f in report.findings)


@pytest.mark.parametrize("command", [["bench", "--modes", "fp32"], ["audit", "--mode", "fp16"]])
@pytest.mark.parametrize("flags, needle", [
    (["--model", "mods:build", "--input-shape", "8"], "does not take --model mods:build"),
    (["--image-size", "8"], "takes neither --seq-len nor --image-size; no numpy workload does"),
])
def test_what_the_backend_cannot_run_is_one_line_and_exit_2(command, flags, needle, capsys):
    rc = main([*command, "--framework", "numpy", *flags])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("ampkit: error:") and needle in err and len(err.splitlines()) == 1, err
