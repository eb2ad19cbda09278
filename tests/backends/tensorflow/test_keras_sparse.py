"""Sparse gradients are gradients (issue #50 point 2): an Embedding's ``IndexedSlices`` gradient with
inf rows, through ampkit.keras, skips the step and halves the scale in ``fit``, in ``mp.train_step``
(eager and traced) and under a one-device MirroredStrategy; the audit's words about it hold. Keras
3's own LossScaleOptimizer applies that step (recorded for the installed version). Marked
``tensorflow``; every case runs in one child (keras_sparse_cases.py: one TensorFlow import)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.tensorflow

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def child() -> str:
    r = subprocess.run([sys.executable, os.path.join(HERE, "keras_sparse_cases.py"), "keras_own", "fit", "train_step",
                        "audit_words", "mirrored"], capture_output=True, text=True, timeout=600, cwd=HERE)
    assert r.returncode == 0, f"{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return r.stdout


def test_keras_own_loss_scale_optimizer_misses_the_inf_rows_and_ampkits_sees_them(child):
    own = re.search(r"keras (\S+) own check_finite (\w+) scale (\S+) weights finite (\w+)", child)
    assert own, child
    if own.group(1).startswith("3.15."):  # the defect docs/ state, on the version they name
        assert own.groups()[1:] == ("True", "32768.0", "False"), own.group(0)
    assert "ampkit check_finite False" in child, child


def test_fit_skips_the_sparse_overflow_then_trains(child):
    assert "fit ok [16384.0, 16384.0]" in child, child


def test_train_step_eager_and_traced_skip_and_halve(child):
    assert "train_step ok eager [16384.0, 8192.0]" in child and "train_step ok traced [16384.0, 8192.0]" in child, child


def test_one_device_mirrored_strategy_fit_and_loop_skip(child):
    assert "mirrored fit ok [16384.0]" in child and "mirrored loop ok 16384.0" in child, child


def test_audit_finding_on_the_embedding_is_true_of_its_code(child):
    assert "audit words ok 2 " in child and 'ampkit.keras.MixedPrecision("fp16", initial_scale=' in child, child
