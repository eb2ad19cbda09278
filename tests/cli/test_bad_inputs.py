"""Issue #11: every mistake ends in one clear line, never a traceback, and leaves no partial file.

One table of bad inputs and faults across doctor, bench, parity and audit and both frameworks.
Every case runs ``python -m ampkit`` in its own folder (holding the user modules of
``user_faults.py``); the cases run four at a time in one module-scoped fixture, each test then
checks its own result: the exit code, exactly one ``ampkit: error:`` line (TensorFlow's native
start-up notices aside), no traceback, and the folder's files unchanged (no output, no temp file).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from user_faults import write_user_files

HUGE = str(10**20)
TF = importlib.util.find_spec("tensorflow") is not None
# TensorFlow's C++ start-up notices ("I0000 00:00:... cudart_stub.cc:31] ...", absl's "WARNING: All log
# messages before absl::InitializeLog() ...") are printed by its native code at import, not by ampkit
NATIVE_LOG = re.compile(r"^([IWEF]\d{4} \d\d:\d\d:|WARNING: All log messages before absl::InitializeLog)")
LAUNCHER = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555"}
FAST = ["--modes", "fp32", "--steps", "2", "--warmup", "0"]

# (id, argv after 'ampkit', extra environment, needle of the error line)
CASES = [
    # ---- bench: output paths
    ("bench-json-missing-folder", ["bench", "--json", "out/b.json"], {}, "does not exist"),
    ("bench-json-is-folder", ["bench", "--json", "sub"], {}, "is a folder"),
    ("bench-json-trailing-slash", ["bench", "--json", "newdir/"], {}, "is a folder"),
    ("bench-json-empty", ["bench", "--json", ""], {}, "--json is empty"),
    ("bench-csv-empty", ["bench", "--csv", ""], {}, "--csv is empty"),
    ("bench-plot-txt", ["bench", "--plot", "out.txt"], {}, "cannot write a plot as .txt"),
    ("bench-plot-stdout", ["bench", "--plot", "-"], {}, "--plot cannot go to stdout"),
    ("bench-plot-missing-folder", ["bench", "--plot", "nope/p.png"], {}, "does not exist"),
    ("bench-csv-as-png", ["bench", "--csv", "rows.png"], {}, "names another format"),
    ("bench-json-as-csv", ["bench", "--json", "doc.csv"], {}, "names another format"),
    ("bench-same-file-twice", ["bench", "--json", "a.out", "--csv", "a.out"], {}, "both write to"),
    ("bench-stdout-twice", ["bench", "--json", "-", "--csv", "-"], {}, "both write to stdout"),
    # ---- bench: numbers
    ("bench-steps-huge", ["bench", "--steps", HUGE], {}, "--steps must be >= 1 and at most 1,000,000"),
    ("bench-steps-zero", ["bench", "--steps", "0"], {}, "--steps must be >= 1"),
    ("bench-steps-float", ["bench", "--steps", "1e20"], {}, "invalid int value"),
    ("bench-warmup-negative", ["bench", "--warmup", "-1"], {}, "--warmup must be >= 0"),
    ("bench-warmup-huge", ["bench", "--warmup", HUGE], {}, "--warmup must be >= 0 and at most"),
    ("bench-batch-zero", ["bench", "--batch-size", "0"], {}, "--batch-size must be a positive integer"),
    ("bench-batch-huge", ["bench", "--batch-size", str(2**40)], {}, "at most 1,048,576"),
    ("bench-budget-beyond-float", ["bench", "--memory-budget", "9" * 400], {}, "too large"),
    ("bench-budget-huge-unit", ["bench", "--memory-budget", "99999999TiB"], {}, "at most 2**60 bytes"),
    ("bench-budget-zero", ["bench", "--memory-budget", "0"], {}, "must be positive"),
    ("bench-budget-garbage", ["bench", "--memory-budget", "lots"], {}, "cannot read memory size"),
    ("bench-classes-zero", ["bench", "--num-classes", "0"], {}, "--num-classes must be >= 1"),
    ("bench-max-batch-zero", ["bench", "--max-batch-size", "0"], {}, "--max-batch-size must be >= 1"),
    ("bench-timeout-zero", ["bench", "--timeout", "0"], {}, "--timeout must be a positive number"),
    ("bench-timeout-nan", ["bench", "--timeout", "nan"], {}, "--timeout must be a positive number"),
    ("bench-shape-huge", ["bench", "--input-shape", "100000,100000,100"], {}, "values per sample"),
    ("bench-shape-garbage", ["bench", "--input-shape", "3,x"], {}, "--input-shape must be"),
    ("bench-unknown-mode", ["bench", "--modes", "fp32,fp12"], {}, "fp12"),
    # ---- bench: distributed environment
    ("bench-rank-abc", ["bench"], {"RANK": "abc"}, "RANK='abc' is not an integer"),
    ("bench-world-size-alone", ["bench"], {"WORLD_SIZE": "2"}, "MASTER_ADDR"),
    ("bench-rank1-alone", ["bench", "--json", "r.json"], {"RANK": "1"}, "without WORLD_SIZE"),
    ("bench-world-size-zero", ["bench"], {"WORLD_SIZE": "0"}, "WORLD_SIZE=0 must be at least 1"),
    ("bench-rank-beyond-world", ["bench"], {"RANK": "3", "WORLD_SIZE": "2", **LAUNCHER}, "must be below WORLD_SIZE"),
    ("bench-bad-port", ["bench"], {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "99999"},
     "not a TCP port"),
    ("bench-tf-distributed", ["bench", "--framework", "tensorflow"], {"RANK": "0", "WORLD_SIZE": "2", **LAUNCHER},
     "PyTorch-only"),
    # ---- doctor
    ("doctor-json-missing-folder", ["doctor", "--quick", "--json", "out/d.json"], {}, "does not exist"),
    ("doctor-json-is-folder", ["doctor", "--quick", "--json", "sub"], {}, "is a folder"),
    ("doctor-json-empty", ["doctor", "--quick", "--json", ""], {}, "--json is empty"),
    ("doctor-tf-json-folder", ["doctor", "--framework", "tensorflow", "--json", "sub"], {}, "is a folder"),
    ("doctor-unknown-framework", ["doctor", "--framework", "jax"], {}, "unknown framework"),
    # ---- parity
    ("parity-epochs-huge", ["parity", "--epochs", HUGE], {}, "--epochs must be >= 1 and at most 10,000"),
    ("parity-seeds-huge", ["parity", "--seeds", "100000"], {}, "--seeds must be >= 1 and at most 1,000"),
    ("parity-tolerance-nan", ["parity", "--tolerance", "nan"], {}, "--tolerance"),
    ("parity-plot-stdout", ["parity", "--plot", "-"], {}, "--plot cannot go to stdout"),
    ("parity-plot-csv", ["parity", "--plot", "curves.csv"], {}, "cannot write a plot as .csv"),
    ("parity-json-folder", ["parity", "--json", "sub"], {}, "is a folder"),
    ("parity-tf-seeds-zero", ["parity", "--framework", "tensorflow", "--seeds", "0"], {}, "--seeds must be >= 1"),
    ("parity-tf-json-empty", ["parity", "--framework", "tensorflow", "--json", ""], {}, "--json is empty"),
    # ---- audit
    ("audit-loss-scale-inf", ["audit", "--loss-scale", "inf"], {}, "--loss-scale must be a positive number"),
    ("audit-steps-huge", ["audit", "--steps", HUGE], {}, "--steps must be >= 1 and at most"),
    ("audit-batch-zero", ["audit", "--batch-size", "0"], {}, "--batch-size must be >= 1"),
    # issue #40: the line says what to change
    ("torch-bench-classes-beyond-outputs", ["bench", "--device", "cpu", "--model", "tmodels:bare", "--input-shape", "8",
                                            "--modes", "fp32", "--steps", "2"], {},
     "the model has 4 outputs per sample but the targets use --num-classes 10 (the default): pass --num-classes 4"),
    ("torch-audit-classes-beyond-outputs", ["audit", "--device", "cpu", "--model", "tmodels:bare", "--input-shape", "8"],
     {}, "more classes than the model outputs: pass --num-classes"),
    ("keras-backend-bogus", ["doctor", "--framework", "tensorflow"], {"KERAS_BACKEND": "bogus"},
     "which Keras does not have; valid backends: tensorflow, jax, torch"),
    # issue #40: it ran and called fp8 "numerically healthy" with every column empty
    ("audit-tensorflow-fp8", ["audit", "--framework", "tensorflow", "--mode", "fp8"], {}, "--mode fp8 is PyTorch-only"),
    ("audit-json-missing-folder", ["audit", "--json", "out/a.json"], {}, "does not exist"),
    ("audit-both-sources", ["audit", "--workload", "mlp", "--model", "tmodels:bare"], {}, "not both"),
    ("audit-timeout-negative", ["audit", "--timeout", "-5"], {}, "--timeout must be a positive number"),
    ("audit-tf-loss-scale", ["audit", "--framework", "tensorflow", "--loss-scale", "-1"], {}, "--loss-scale"),
    # ---- user code that fails: PyTorch (each probed in a child: ampkit survives)
    ("bench-torch-segfault", ["bench", "--device", "cpu", "--model", "tmodels:segv", "--input-shape", "8", *FAST],
     {}, "SIGSEGV"),
    ("bench-torch-sys-exit-at-import", ["bench", "--device", "cpu", "--model", "exits_at_import:f",
                                        "--input-shape", "8", *FAST], {}, "sys.exit(3)"),
    ("bench-torch-ctrl-c-at-import", ["bench", "--device", "cpu", "--model", "interrupts_at_import:f",
                                      "--input-shape", "8", *FAST], {}, "KeyboardInterrupt"),
    ("bench-torch-hang", ["bench", "--device", "cpu", "--model", "tmodels:hang", "--input-shape", "8",
                          "--timeout", "3", "--json", "h.json", *FAST], {}, "no result after 3 s"),
    ("bench-torch-meta-device", ["bench", "--device", "cpu", "--model", "tmodels:meta", "--input-shape", "8", *FAST],
     {}, "on the meta device"),
    ("bench-torch-wrong-classes", ["bench", "--device", "cpu", "--model", "tmodels:bare", "--input-shape", "8",
                                   "--json", "b.json", *FAST], {}, "Target 6 is out of bounds"),
    ("bench-torch-wrong-input-shape", ["bench", "--device", "cpu", "--model", "tmodels:bare", "--input-shape", "5",
                                       "--num-classes", "4", *FAST], {}, "failed a training step on a probe batch"),
    ("audit-torch-segfault", ["audit", "--device", "cpu", "--model", "tmodels:segv", "--input-shape", "8",
                              "--json", "a.json"], {}, "SIGSEGV"),
    # ---- user code that fails: Keras
    ("bench-keras-wrong-input-shape", ["bench", "--framework", "tensorflow", "--device", "cpu", "--model",
                                       "kmodels:bare", "--input-shape", "5", "--num-classes", "4", *FAST],
     {}, "--input-shape 5 contradicts the input shape kmodels:bare declares (8 per sample)"),
    ("bench-keras-wrong-classes", ["bench", "--framework", "tensorflow", "--device", "cpu", "--model", "kmodels:bare",
                                   "--input-shape", "8", "--num-classes", "10", "--csv", "rows.csv", *FAST],
     {}, "--num-classes 10 contradicts kmodels:bare, whose output has 4 unit(s)"),
    ("audit-keras-wrong-input-shape", ["audit", "--framework", "tensorflow", "--device", "cpu", "--model",
                                       "kmodels:bare", "--input-shape", "5", "--num-classes", "4"], {},
     "--input-shape 5 contradicts the input shape kmodels:bare declares"),
    ("audit-keras-sys-exit-at-import", ["audit", "--framework", "tensorflow", "--device", "cpu", "--model",
                                        "exits_at_import:f", "--input-shape", "8"], {}, "sys.exit(3)"),
]


def _run(argv, env_extra, cwd, timeout=300):
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update(env_extra)
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "ampkit", *argv], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout)
    return r, time.monotonic() - t0


def _files(folder) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory, request):
    """Runs the selected cases (all, or those -k chose), four at a time."""
    chosen = {item.callspec.params["case"][0] for item in request.session.items
              if hasattr(item, "callspec") and "case" in item.callspec.params}

    def one(case):
        name, argv, env, _ = case
        if "keras" in name and not TF:
            return name, None
        folder = tmp_path_factory.mktemp(name)
        write_user_files(folder)
        (folder / "sub").mkdir()
        before = _files(folder)
        r, seconds = _run(argv, env, folder)
        return name, (r, seconds, before, _files(folder))

    # pytest makes its base folder on first use, unguarded: four threads making it at once race
    # (FileExistsError) when this module is the first of its xdist worker to need a tmp_path
    tmp_path_factory.getbasetemp()
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(one, [c for c in CASES if c[0] in chosen]))


def assert_one_error_line(r, needle: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not NATIVE_LOG.match(ln)]
    assert len(lines) == 1 and lines[0].startswith("ampkit: error: "), r.stderr[-3000:]
    assert needle in lines[0], lines[0]
    assert r.stdout == "", r.stdout[-2000:]


def test_at_least_40_distinct_cases():
    assert len({c[0] for c in CASES}) == len(CASES) >= 40
    assert {c[1][0] for c in CASES} == {"doctor", "bench", "parity", "audit"}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_leaves_no_file(case, outcomes):
    name, argv, env, needle = case
    if outcomes[name] is None:
        pytest.skip("needs TensorFlow")
    r, seconds, before, after = outcomes[name]
    assert_one_error_line(r, needle)
    assert after == before, f"files left behind: {sorted(after - before)}"
    if "torch" not in name and "keras" not in name:
        assert seconds < 30, f"a bad option took {seconds:.1f} s to be refused"  # before any framework work


def test_invalid_output_path_on_a_long_bench_exits_in_seconds(tmp_path):
    r, seconds = _run(["bench", "--device", "cpu", "--workload", "cnn", "--steps", "1000000", "--modes", "all",
                       "--plot", "missing/plot.png"], {}, tmp_path)
    assert_one_error_line(r, "does not exist")
    assert seconds < 10, seconds


def test_printing_model_keeps_json_on_stdout(tmp_path):
    write_user_files(tmp_path)
    r, _ = _run(["bench", "--device", "cpu", "--model", "tmodels:printing", "--input-shape", "8", "--num-classes",
                 "4", *FAST, "--json", "-"], {}, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)  # exactly one document: the prints went to stderr
    assert doc["command"] == "bench" and doc["results"][0]["status"] == "ok"
    assert "hello from the user's factory" in r.stderr and "hello from forward" in r.stderr


def test_atomic_write_leaves_nothing_behind_on_failure(tmp_path):
    from ampkit.outputs import atomic_write
    from ampkit.render.output import write_csv

    target = tmp_path / "x.json"
    with pytest.raises(RuntimeError), atomic_write(str(target)) as fh:
        fh.write("{half")
        raise RuntimeError("interrupted mid-write")
    assert list(tmp_path.iterdir()) == []  # neither the target nor a temporary file
    write_csv([{"a": 1}], str(tmp_path / "r.csv"), ["a"])
    assert (tmp_path / "r.csv").read_text().splitlines() == ["a", "1"] and len(list(tmp_path.iterdir())) == 1
