"""ampkit.keras on TensorFlow: tf.distribute (issue #30.1), the user's own global policy (#30.4) and
``MixedPrecision.verify`` (#22, Keras half). Marked ``tensorflow``; TensorFlow never loads here.

Keras 3's scenarios share one child process (TensorFlow loads once; the two logical CPU devices are
made before it initialises): keras_dist_cases.py's ``mirrored`` and keras_policy_cases.py's
``tutorial_order`` and ``contract``. tf_keras's run in the child of the Keras 2 tutorial test.

* MirroredStrategy, fp16: an overflowing sample on replica 0, then on replica 1 (shuffle=False,
  arranged batches), in ``fit`` and in a ``strategy.run`` loop in a ``tf.function`` without
  ``opt.build``: skipped on both replicas, the scale halved, the weights unchanged and finite; bf16
  trains. (Keras 3.15's own LossScaleOptimizer reads replica 0's flag only: replica 1's overflow NaNs
  every weight.)
* The tutorial's order — global ``mixed_float16`` first, then ampkit with auto, bf16 and fp16,
  models built inside and outside the scope: one line names the policy found; a custom loop on a
  float16-computing model keeps its gradients (a 1e-9-scaled loss still changes the weights).
* ``verify``: nothing on the unmodified model, exactly one finding naming a planted float16 output
  layer, and exactly one on keras.applications' MobileNetV3Small (random weights), whose softmax
  output computes in float16 under a mixed policy — none once it is set to float32.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.tensorflow

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def keras3_child() -> str:
    r = subprocess.run([sys.executable, os.path.join(HERE, "keras_dist_cases.py"), "mirrored", "tutorial_order",
                        "contract"], capture_output=True, text=True, timeout=900, cwd=HERE)
    assert r.returncode == 0, f"{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return r.stdout


def test_overflow_on_either_replica_skips_everywhere_in_fit_and_custom_loop_and_bf16_trains(keras3_child):
    for line in ("fit ok [32.0, 16.0, 16.0]", "compile-made ok", "loop ok [32.0, 16.0, 16.0]", "bf16 ok"):
        assert line in keras3_child, keras3_child


def test_tutorial_global_policy_reported_adopted_and_float16_gradients_kept(keras3_child):
    for line in ("auto ok", "bf16 ok", "fp16 ok", "no policy, no line"):
        assert line in keras3_child, keras3_child
    assert "global Keras 3." in keras3_child and "'mixed_float16'" in keras3_child


def test_verify_finds_the_planted_and_the_applications_float16_output_only(keras3_child):
    assert "planted ok" in keras3_child and "fit refusal ok" in keras3_child and "contract extras ok" in keras3_child
    assert "applications ok layer 'predictions' (output)" in keras3_child
