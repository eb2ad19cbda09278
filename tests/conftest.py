from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest


def _private_auto_cache() -> str:
    """Where `auto` caches measured verdicts during the tests (ampkit.auto_cache): never a developer's
    real ~/.cache/ampkit. One folder per test run, shared by its xdist workers and the subprocesses
    they start (they inherit the environment), so a test that resolves `auto` in-process and then in
    a CLI child sees the same verdict."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run:
        path = os.path.join(tempfile.gettempdir(), f"ampkit-test-cache-{run}")
        os.makedirs(path, exist_ok=True)
        return path
    path = tempfile.mkdtemp(prefix="ampkit-test-cache-")
    atexit.register(shutil.rmtree, path, True)
    return path


os.environ["AMPKIT_CACHE_DIR"] = _private_auto_cache()
# One intra-op thread per torch process (the workers and every process they start inherit it): the suite
# runs two xdist workers on a 2-core machine, and a process on two threads there waits at every op's
# barrier for a descheduled thread (a default parity run took 191 s in the suite, 15 s alone). A test
# that times at another count sets it itself (torch.set_num_threads, --threads).
os.environ.setdefault("OMP_NUM_THREADS", "1")


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def _has_tensorflow() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorflow") is not None


def _compile_sources() -> None:
    """The project's source (and the tests' helper modules that child processes import) compiled to
    bytecode once, before the run. Where PYTHONDONTWRITEBYTECODE is set (this machine's and CI's
    environment) no process writes a .pyc, so each of the suite's ~600 processes compiled every ampkit
    module it imported from source: 0.1-0.3 s of CPU apiece, 7% of a bench file's CPU time. A .pyc is
    only read when it matches its source (CPython checks the source's mtime and size), so an edit
    during the run is still seen."""
    import compileall
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for folder in (root / "src", root / "tests"):
        try:
            compileall.compile_dir(str(folder), quiet=2, workers=1)
        except OSError:  # a read-only checkout: each process compiles what it imports, as before
            pass


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # once, in the process that starts the xdist workers (or runs alone)
        _compile_sources()
    # xdist's --dist loadfile hands out files in the order collected (see the sort below), not sorted
    # by how many tests they hold: by default it put the files of few but slow tests last, and one
    # worker ran them alone at the end of the suite
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    no_cuda = pytest.mark.skip(reason="needs a CUDA device")
    no_tf = pytest.mark.skip(reason="needs TensorFlow (pip install 'ampkit[tensorflow]')")
    cuda, tf = _has_cuda(), _has_tensorflow()
    for item in items:
        if "gpu" in item.keywords and not cuda:
            item.add_marker(no_cuda)
        if "tensorflow" in item.keywords and not tf:
            item.add_marker(no_tf)
    # the slowest files first (seconds per file from a full run, tests/durations.json; a file not
    # listed counts as quick), so that two workers end together: longest first is what keeps the last
    # file small. A stable sort: each file's tests stay together and in their order.
    seconds = _file_seconds()
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::", 1)[0], 0))


def _file_seconds() -> dict:
    import json
    from pathlib import Path

    try:
        return json.loads((Path(__file__).parent / "durations.json").read_text())
    except (OSError, ValueError):
        return {}
