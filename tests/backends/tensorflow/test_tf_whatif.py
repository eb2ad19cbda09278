"""``ampkit audit --what-if`` for Keras 3 and tf_keras: the planted cases (forward overflow, gradient
underflow at the default loss scale, a clean model, an outlier input channel) predicted from float32
and checked against real fp16/bf16 audits of the same model and batch. All four cases, both Kerases, run
in one fresh interpreter (bodies in tf_whatif_cases.py)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.tensorflow

ROOT = os.path.dirname(os.path.abspath(__file__))


def test_keras_what_if_predictions_match_real_audits():
    """Keras 3 and tf_keras in one child (one TensorFlow import for both)."""
    if not all(importlib.util.find_spec(m) for m in ("keras", "tf_keras")):  # not importorskip: no TensorFlow here
        pytest.skip("needs keras and tf_keras")
    call = "import tf_whatif_cases; tf_whatif_cases.planted('keras'); tf_whatif_cases.planted('tf_keras')"
    r = subprocess.run([sys.executable, "-c", call], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{call} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    for flavor in ("keras", "tf_keras"):
        assert f"{flavor} what-if planted cases: ok" in r.stdout
