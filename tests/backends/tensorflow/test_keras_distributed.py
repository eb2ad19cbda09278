"""Keras fp16 under tf.distribute.MirroredStrategy with two logical CPU devices (issue #30).

The devices must be configured before TensorFlow initialises, so the scenarios run in one child
process (keras_dist_cases.py). An overflowing sample on replica 0, then on replica 1: the step is
skipped on both replicas, the scale halved, the weights unchanged and finite — in ``fit`` and in a
``strategy.run`` custom loop inside a ``tf.function`` without ``opt.build``. (Keras 3.15's own
LossScaleOptimizer skips only for replica 0: it reads the first replica's finite flag.)
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.tensorflow

HERE = os.path.dirname(os.path.abspath(__file__))


def _run(case: str, timeout: int = 600) -> str:
    r = subprocess.run([sys.executable, os.path.join(HERE, "keras_dist_cases.py"), case], capture_output=True,
                       text=True, timeout=timeout, cwd=HERE)
    assert r.returncode == 0, f"{case} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return r.stdout


def test_overflow_on_either_replica_skips_everywhere_in_fit_and_custom_loop_and_bf16_trains():
    out = _run("mirrored")
    for line in ("fit ok", "loop ok", "bf16 ok"):
        assert line in out, out
