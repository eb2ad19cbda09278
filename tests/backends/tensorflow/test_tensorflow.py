"""The TensorFlow/Keras side. Marked `tensorflow`: skips cleanly where TensorFlow is absent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.tensorflow


ROOT = os.path.dirname(os.path.abspath(__file__))


def _case(name: str) -> None:
    """Run tests/tf_cases.py::name in a fresh interpreter (never TensorFlow in this process)."""
    r = subprocess.run([sys.executable, "-c", f"import tf_cases; tf_cases.{name}()"], cwd=ROOT,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"tf_cases.{name} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"


def _cli(*args, cwd=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "ampkit", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def test_doctor_selftests_pass_with_measured_speedups():
    _case("doctor_selftests")


def test_doctor_framework_all_holds_both_documents():
    r = _cli("doctor", "--framework", "all", "--quick", "--json", "-")
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert set(doc["frameworks"]) == {"torch", "tensorflow"}
    for fw, sub in doc["frameworks"].items():
        assert sub["framework"] == fw and set(sub["modes"]) == {"fp32", "tf32", "fp16", "bf16", "fp8"}
    assert doc["frameworks"]["tensorflow"]["environment"]["keras_version"].startswith("3.")


def test_bench_mlp_three_modes_ok():
    r = _cli("bench", "--framework", "tensorflow", "--workload", "mlp", "--modes", "fp32,bf16,fp16",
             "--steps", "3", "--warmup", "1", "--json", "-")
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["framework"] == "tensorflow" and [x["mode"] for x in doc["results"]] == ["fp32", "bf16", "fp16"]
    for row in doc["results"]:
        assert row["status"] == "ok", row
        assert row["samples_per_s"] > 0 and row["peak_memory_bytes"] > 0 and row["batch_size"] == 64
    assert doc["flops_per_sample"] > 0


def test_parity_digits_each_mode_reaches_0_9():
    _case("parity_digits")


def test_callback_records_halving_and_skipped_step_and_policy_is_restored():
    _case("callback_history")


def test_last_layer_in_float16_warns():
    _case("last_layer_warns")


KMODELS = textwrap.dedent('''
    import keras
    def hot():
        inputs = keras.Input((12,))
        h = keras.layers.Dense(8, name="first")(inputs)
        h = keras.layers.Rescaling(1e5, name="boom")(h)
        return keras.Model(inputs, keras.layers.Dense(3, name="head")(h))
''')


def test_audit_names_the_overflowing_keras_layer(tmp_path):
    (tmp_path / "kmodels.py").write_text(KMODELS)
    r = _cli("audit", "--framework", "tensorflow", "--model", "kmodels:hot", "--input-shape", "12",
             "--num-classes", "3", "--mode", "fp16", "--json", "-", cwd=tmp_path)
    assert r.returncode == 1, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["first_nonfinite"]["name"] == "boom" and doc["first_nonfinite"]["phase"] == "forward"
    assert [lay["name"] for lay in doc["layers"]] == ["first", "boom", "head"]
    r = _cli("audit", "--framework", "tensorflow", "--model", "kmodels:hot", "--input-shape", "12",
             "--num-classes", "3", "--mode", "bf16", "--json", "-", cwd=tmp_path)
    assert r.returncode == 0 and json.loads(r.stdout)["first_nonfinite"] is None


MIRRORED = textwrap.dedent('''
    import os, sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras, numpy as np
    import ampkit.keras as ak
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert strategy.num_replicas_in_sync == 2
    for mode in ("bf16", "fp16"):
        mp = ak.MixedPrecision(mode)
        with strategy.scope(), mp.scope():
            keras.utils.set_random_seed(0)
            inputs = keras.Input((8,))
            out = keras.layers.Dense(3, dtype="float32")(keras.layers.Dense(16, activation="relu")(inputs))
            model = keras.Model(inputs, out)
            model.compile(optimizer=mp.optimizer(keras.optimizers.SGD(0.1)),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        w0 = model.layers[1].kernel.numpy().copy()
        x = np.random.default_rng(0).standard_normal((16, 8)).astype("float32")
        hist = model.fit(x, np.arange(16) % 3, batch_size=16, epochs=1, verbose=0)
        assert np.isfinite(hist.history["loss"][0])
        assert not np.array_equal(w0, model.layers[1].kernel.numpy()), mode
        assert model.layers[1].compute_dtype == {"bf16": "bfloat16", "fp16": "float16"}[mode]
        print(mode, "ok", hist.history["loss"][0])
''')


def test_mirrored_strategy_two_logical_cpus_bf16_and_fp16(tmp_path):
    script = tmp_path / "mirrored.py"
    script.write_text(MIRRORED)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "bf16 ok" in r.stdout and "fp16 ok" in r.stdout


def test_bench_auto_batch_with_memory_budget_measures_each_trial_fresh():
    r = _cli("bench", "--framework", "tensorflow", "--workload", "mlp", "--modes", "fp32", "--batch-size", "auto",
             "--memory-budget", "100MiB", "--max-batch-size", "256", "--steps", "2", "--warmup", "1", "--json", "-")
    assert r.returncode == 0, r.stderr[-2000:]
    (row,) = json.loads(r.stdout)["results"]
    assert row["status"] == "ok" and row["batch_size"] == row["max_batch_size"], row
    budget = 100 * 2**20
    for _b, ok, peak in row["search"]:
        assert ok == (peak is not None and peak <= budget)
    fitting = sorted((b, peak) for b, ok, peak in row["search"] if ok)
    assert fitting and fitting[-1][0] == row["max_batch_size"]
    # trials in fresh processes: a larger batch never measures less than a much smaller one did
    assert fitting[-1][1] >= fitting[0][1] * 0.9


def test_auto_in_bench_and_audit_and_doctor_intervals():
    """--modes fp32,auto runs auto's mode once and marks it; audit --mode auto says what it audited."""
    r = _cli("bench", "--framework", "tensorflow", "--workload", "mlp", "--modes", "fp32,auto", "--repeats", "2",
             "--steps", "3", "--warmup", "1", "--json", "-")
    assert r.returncode == 0, r.stderr[-3000:]
    rows = json.loads(r.stdout)["results"]
    auto = [row for row in rows if row["resolved_from"] == "auto"]
    assert len(auto) == 1 and auto[0]["resolved_reason"] and len(rows) == len({row["mode"] for row in rows})
    assert all(row["repeats"] == 2 for row in rows)
    r = _cli("audit", "--framework", "tensorflow", "--mode", "auto", "--json", "-")
    assert r.returncode in (0, 1), r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["resolved_from"] == "auto" and doc["mode"] in ("fp16", "bf16") and "auto resolves to" in doc["note"]
