"""Issue 23: bench --explain on Keras/TensorFlow -- the XPlane trace's op names sorted into the
same categories (in-process: no TensorFlow needed for that), and a real CLI run (TensorFlow in a
child process, never in this one): the same keys as PyTorch, shares summing to 1, casts only where
the policy casts, loss scaling only in fp16, the approximation said."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from ampkit.backends.tensorflow.profile_breakdown import category, summarize
from ampkit.breakdown import CATEGORIES

pytestmark = pytest.mark.tensorflow


@pytest.mark.parametrize("name, op_type, want", [
    ("sequential_1/dense_1/MatMul", "MatMul", "matmul_conv"),
    ("gradient_tape/sequential_1/dense_1_2/MatMul/MatMul_1", "MatMul", "matmul_conv"),
    ("sequential_1/dense_2_1/BiasAdd", "_MklNativeFusedMatMul", "matmul_conv"),
    ("sequential_1/conv2d/convolution", "Conv2D", "matmul_conv"),
    ("sequential_1/dense_1_2/Cast/Cast", "Cast", "casts"),
    ("cond/then/_0/cond/adam_w/Mul_13", "Mul", "optimizer"),
    ("adam_w/AssignSubVariableOp_6", "AssignSubVariableOp", "optimizer"),
    ("cond/then/_0/cond/truediv", "RealDiv", "loss_scaling"),  # the LossScaleOptimizer's unscaling
    ("IsFinite_2", "IsFinite", "loss_scaling"),
    ("All", "All", "loss_scaling"),
    ("sequential_1/dense_1/Gelu/Erfc", "Erfc", "elementwise_norm"),
    ("sequential_1/batch_normalization/FusedBatchNormV3", "FusedBatchNormV3", "elementwise_norm"),
    ("sequential_1/dense_1/Cast/ReadVariableOp", "ReadVariableOp", "other"),
])
def test_tensorflow_ops_fall_into_their_category(name, op_type, want):
    assert category(name, op_type) == want


def test_parallel_op_time_is_scaled_to_the_step():
    times = {("a/MatMul", "MatMul"): 12.0, ("a/Cast", "Cast"): 4.0, ("adam/Mul", "Mul"): 4.0}  # 20 ms over 1 step
    b = summarize(times, step_ms=10.0, steps=1, matmuls=[(32, 64, 64, 1.0)])
    assert b.ms["matmul_conv"] == 6.0 and b.ms["casts"] == 2.0 and b.ms["other"] == 0.0
    assert math.isclose(sum(b.shares.values()), 1.0, abs_tol=1e-3) and b.approximate
    assert b.matmuls == [{"m": 32, "n": 64, "k": 64, "ms": 6.0}]


#: both modes measured in ONE child (one TensorFlow import; the CLI would start three), after a run
#: without --explain that must not start the profiler nor import the module that uses it
CHILD = """
import json, sys
from ampkit.backends.tensorflow.backend import TensorFlowBackend
from ampkit.bench.config import BenchConfig
from ampkit.bench.ops import MeasureRequest
from ampkit.bench.session import measure_mode
from ampkit.bench.explain import explain_rows
from ampkit.bench.report import derive_relative
import tensorflow as tf
real_start = tf.profiler.experimental.start
def refuse(*a, **k):
    raise AssertionError("the profiler was started without --explain")
tf.profiler.experimental.start = refuse
backend = TensorFlowBackend()  # as a bench child measures: the backend's session, the neutral row and size table
plain = measure_mode(backend, MeasureRequest(BenchConfig(workload="mlp", batch_size=32, steps=2, warmup=1), "fp32",
                                             backend.target("cpu")), None)
assert plain.status == "ok" and plain.breakdown is None, plain.error
assert "ampkit.backends.tensorflow.profile_breakdown" not in sys.modules
tf.profiler.experimental.start = real_start
cfg = BenchConfig(workload="mlp", batch_size=32, steps=3, warmup=1, explain=True)
rows = [measure_mode(backend, MeasureRequest(cfg, m, backend.target("cpu")), lambda *a: None) for m in ("fp32", "fp16")]
derive_relative(rows)
explain_rows(rows, {"cpu": {"avx512_fp16": False}, "device": "CPU:0"})
sys.stdout.write(json.dumps({"results": [r.to_dict() for r in rows]}))
"""


def test_explain_on_keras_has_the_same_keys():
    r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    fp32, fp16 = json.loads(r.stdout)["results"]
    for row in (fp32, fp16):
        assert row["status"] == "ok", row["error"]
        assert set(row["breakdown"]) == set(CATEGORIES)
        assert math.isclose(sum(row["breakdown"].values()), 1.0, abs_tol=0.05)
        assert row["explain_detail"]["source"].startswith("tf.profiler.experimental")
        assert row["explain_detail"]["approximate"]
    assert fp32["breakdown"]["casts"] < 0.01 < fp16["breakdown"]["casts"] + 0.01 and fp16["breakdown"]["casts"] > 0
    assert fp16["breakdown"]["loss_scaling"] > 0 and fp32["breakdown"]["loss_scaling"] == 0
    assert fp16["explanation"][0].startswith("fp16 is ") and fp32["explanation"][0].startswith("fp32 is the baseline")
    if fp16["speedup_vs_fp32"] < 1:
        assert any(" grew most: " in s for s in fp16["explanation"])
    assert {"64", "256"} <= set(fp16["explain_detail"]["size_table"])
