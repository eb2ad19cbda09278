"""Issue #36 acceptance 4: the plan cases through Keras per-layer dtype policies, Keras 3 and
tf_keras, each in one child process (TensorFlow loads once per Keras: keras_plan_cases.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.tensorflow, pytest.mark.slow]
HERE = os.path.dirname(os.path.abspath(__file__))


def _cases(flavor: str, tmp) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, os.path.join(HERE, "keras_plan_cases.py"), flavor, str(tmp)],
                       capture_output=True, text=True, timeout=600, cwd=HERE, env=env)
    assert r.returncode == 0, f"{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return {d["case"]: d for d in (json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith('{"case"'))}


@pytest.fixture(scope="module", params=["keras", "tf_keras"])
def cases(request, tmp_path_factory):
    if request.param == "tf_keras":
        if importlib.util.find_spec("tf_keras") is None:  # not importorskip: TensorFlow stays out of this process
            pytest.skip("needs tf_keras")
    return request.param, _cases(request.param, tmp_path_factory.mktemp(request.param))


def test_fp16_attention_nonfinite_without_the_plan_finite_with_it(cases):
    flavor, c = cases
    none = c["fp16_none"]
    assert all(v != v for v in none["losses"]) and none["skipped"] == 4
    for label in ("fp16_keep", "fp16_file"):
        got = c[label]
        assert all(v == v and v < 10 for v in got["losses"]) and got["skipped"] == 0, (label, got)
        assert got["compute"] == {"embed": "float16", "q": "float32", "k": "float32", "v": "float32",
                                  "head": "float16"}, (label, got["compute"])
        assert got["plan_findings"] == []
    assert c["fp16_keep"]["plan"] == {"attn": "fp32"} and c["fp16_file"]["plan"] == {"ScoresAttention": "fp32"}


def test_bf16_cancellation_back_to_fp32_level(cases):
    _, c = cases
    b = c["bf16"]
    assert b["none"]["err"] > 0.5 and b["none"]["cancel"] == "bfloat16"
    assert b["keep"]["err"] < 1e-6 and b["keep"]["cancel"] == "float32" and b["keep"]["body"] == "bfloat16"


def test_fp8_outlier_layer_kept_out(cases):
    flavor, c = cases
    if flavor == "tf_keras":  # Keras 2 has no float8 training: the engine says so in one line
        assert "fp8" in c["fp8"]["error"] and "Keras 3" in c["fp8"]["error"]
        return
    layers = c["fp8"]["layers"]
    assert layers["mid"] == [False, "kept out of fp8 by the plan"]
    assert layers["a"][0] is True and layers["b"][0] is True


def test_bad_plans_one_line(cases):
    _, c = cases
    bad = c["bad"]
    assert "entry 'nope*' matches no module" in bad["nothing"]
    assert "entry 'attn': unknown or unsupported mode 'fp7'" in bad["mode"]
    assert "is for framework 'torch'" in bad["torch"]
    assert all("\n" not in v for v in bad.values())
