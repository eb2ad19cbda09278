"""Keras 3 on its torch and JAX backends (issue #30): ``ampkit.keras`` trains there without
TensorFlow — fit and ``mp.train_step`` in fp16 skip an injected overflow and halve the scale, a
plain optimizer on a float16 model gets loss scaling, the loss-scale alarm fires once — and
``--framework tensorflow`` refuses that backend in one line instead of crashing (it segfaulted
with KERAS_BACKEND=torch). Each backend in its own child process (the backend is fixed at import)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.tensorflow

HERE = os.path.dirname(os.path.abspath(__file__))
BACKENDS = [pytest.param("jax", marks=pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                                                         reason="needs jax (the test extra)")),
            pytest.param("torch", marks=pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                                           reason="needs torch"))]


@pytest.mark.parametrize("backend", BACKENDS)
def test_fit_and_custom_loop_skip_overflow_and_halve_scale_without_tensorflow(backend):
    r = subprocess.run([sys.executable, os.path.join(HERE, "keras_backend_cases.py"), "train_and_skip"],
                       capture_output=True, text=True, timeout=600, cwd=HERE, env={**os.environ, "KERAS_BACKEND": backend})
    assert r.returncode == 0, f"{backend}:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    for line in ("fit ok", "loop ok", "unscaled ok", "alarm ok", "no tensorflow"):
        assert line in r.stdout, r.stdout


@pytest.mark.parametrize("backend,command", [("torch", ["bench", "--workload", "mlp"]), ("jax", ["doctor", "--quick"]),
                                             ("jax", ["doctor", "--quick", "--framework", "all"])])
def test_cli_refuses_another_keras_backend_in_one_line(backend, command):
    r = subprocess.run([sys.executable, "-m", "ampkit", command[0], "--framework", "tensorflow", *command[1:]],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "KERAS_BACKEND": backend})
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, (r.returncode, r.stderr[-2000:])
    assert f"Keras is set to the {backend!r} backend" in lines[0] and "KERAS_BACKEND=tensorflow" in lines[0]
    assert "self-test" not in r.stdout and "measure" not in r.stdout, r.stdout  # refused before any framework ran
