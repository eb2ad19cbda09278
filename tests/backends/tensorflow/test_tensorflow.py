"""The TensorFlow/Keras side. Marked `tensorflow`: skips cleanly where TensorFlow is absent."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.tensorflow


ROOT = os.path.dirname(os.path.abspath(__file__))


def _case(name: str, **env) -> None:
    """Run tests/tf_cases.py::name in a fresh interpreter (never TensorFlow in this process)."""
    r = subprocess.run([sys.executable, "-c", f"import tf_cases; tf_cases.{name}()"], cwd=ROOT,
                       capture_output=True, text=True, timeout=900, env={**os.environ, **env} if env else None)
    assert r.returncode == 0, f"tf_cases.{name} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"


# The Keras 3 cases of tf_cases.py share one fresh interpreter (one TensorFlow import instead of one
# each: several seconds apiece on a 2-core CPU). Each case's verdict is its own (written after each case,
# so a crash names the case it happened in); the cases that leave process state changed (keras.Model's
# methods patched, the stop flag set) run last, in this order.
SHARED = ("callback_history", "last_layer_warns", "parity_digits", "doctor_selftests",
          "training_runs_with_the_modes_tf32_setting", "audit_keeps_the_steps_that_finished")
_TEST_OF = {
    "callback_history": "test_callback_records_halving_and_skipped_step_and_policy_is_restored",
    "last_layer_warns": "test_last_layer_in_float16_warns",
    "parity_digits": "test_parity_digits_each_mode_reaches_0_9",
    "doctor_selftests": "test_doctor_selftests_pass_with_measured_speedups",
    "training_runs_with_the_modes_tf32_setting": "test_fp32_training_runs_with_tf32_off_in_bench_and_parity",
    "audit_keeps_the_steps_that_finished": "test_audit_keeps_the_steps_that_finished_when_asked_to_stop",
}
_SHARED_CHILD = textwrap.dedent('''
    import json, sys, traceback
    import tf_cases
    out, done = sys.argv[1], {}
    for name in sys.argv[2:]:
        try:
            getattr(tf_cases, name)()
            done[name] = None
        except BaseException:
            done[name] = traceback.format_exc()
        with open(out, "w") as fh:
            json.dump(done, fh)
''')


@pytest.fixture(scope="module")
def shared_cases(request, tmp_path_factory):
    """Runs, in one child, the SHARED cases of the tests this session selected (all, or those -k chose)."""
    selected = {item.name for item in request.session.items}
    chosen = [name for name in SHARED if _TEST_OF[name] in selected]
    out = tmp_path_factory.mktemp("tf_cases") / "done.json"
    r = subprocess.run([sys.executable, "-c", _SHARED_CHILD, str(out), *chosen], cwd=ROOT, capture_output=True,
                       text=True, timeout=900)
    done = json.loads(out.read_text()) if out.exists() else {}
    return done, r


def _shared(shared_cases, name: str) -> None:
    done, r = shared_cases
    assert name in done, f"tf_cases.{name} never finished (exit {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    assert done[name] is None, f"tf_cases.{name} failed:\n{done[name]}\n{r.stderr[-2000:]}"


def _cli(*args, cwd=None, timeout=600, env=None):
    return subprocess.run([sys.executable, "-m", "ampkit", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env={**os.environ, **env} if env else None)


def test_doctor_selftests_pass_with_measured_speedups(shared_cases):
    _shared(shared_cases, "doctor_selftests")


def test_doctor_framework_all_holds_both_documents():
    r = _cli("doctor", "--framework", "all", "--quick", "--json", "-")
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert set(doc["frameworks"]) == {"torch", "tensorflow"}
    for fw, sub in doc["frameworks"].items():
        assert sub["framework"] == fw and set(sub["modes"]) == {"fp32", "tf32", "fp16", "bf16", "fp8"}
    assert doc["frameworks"]["tensorflow"]["environment"]["keras_version"].startswith("3.")
    # the program times TensorFlow on one thread on a CPU, as the PyTorch doctor does (#41)
    assert doc["frameworks"]["tensorflow"]["environment"]["tf_threads"] == {"intra_op": 1, "inter_op": 1}


def test_bench_mlp_rows_ok_under_mirrored_strategy_with_two_replicas():
    """--strategy mirrored --replicas 2 on a CPU: two logical devices, three rows of 2 replicas each with
    the global batch (the plain single-device bench runs in the tests below and in tests/architecture)."""
    r = _cli("bench", "--framework", "tensorflow", "--workload", "mlp", "--modes", "fp32,bf16,fp16",
             "--strategy", "mirrored", "--replicas", "2", "--steps", "2", "--warmup", "1", "--json", "-")
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["framework"] == "tensorflow" and [x["mode"] for x in doc["results"]] == ["fp32", "bf16", "fp16"]
    assert doc["replicas"] == 2 and doc["config"]["strategy"] == "mirrored"
    assert doc["environment"]["keras_backend"] == "tensorflow"
    for row in doc["results"]:
        assert row["status"] == "ok", row
        assert row["samples_per_s"] > 0 and row["peak_memory_bytes"] > 0
        assert row["batch_size"] == 64 and row["replicas"] == 2, row
    assert doc["flops_per_sample"] > 0


def test_parity_digits_each_mode_reaches_0_9(shared_cases):
    _shared(shared_cases, "parity_digits")


def test_callback_records_halving_and_skipped_step_and_policy_is_restored(shared_cases):
    _shared(shared_cases, "callback_history")


def test_last_layer_in_float16_warns(shared_cases):
    _shared(shared_cases, "last_layer_warns")


KMODELS = textwrap.dedent('''
    import keras
    def hot():
        inputs = keras.Input((12,))
        h = keras.layers.Dense(8, name="first")(inputs)
        h = keras.layers.Rescaling(1e5, name="boom")(h)
        return keras.Model(inputs, keras.layers.Dense(3, name="head")(h))
''')


def test_audit_keeps_the_steps_that_finished_when_asked_to_stop(shared_cases):
    _shared(shared_cases, "audit_keeps_the_steps_that_finished")


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


def test_bench_auto_batch_with_memory_budget_measures_each_trial_fresh():
    """The mlp's search starts at its batch of 64 and doubles to the cap of 128: two trials that fit,
    each in a fresh process (the cap was 256: a third trial, one TensorFlow child more)."""
    r = _cli("bench", "--framework", "tensorflow", "--workload", "mlp", "--modes", "fp32", "--batch-size", "auto",
             "--memory-budget", "100MiB", "--max-batch-size", "128", "--steps", "2", "--warmup", "1", "--json", "-")
    assert r.returncode == 0, r.stderr[-2000:]
    (row,) = json.loads(r.stdout)["results"]
    assert row["status"] == "ok" and row["batch_size"] == row["max_batch_size"], row
    budget = 100 * 2**20
    for _b, ok, peak in row["search"]:
        assert ok == (peak is not None and peak <= budget)
    fitting = sorted((b, peak) for b, ok, peak in row["search"] if ok)
    assert len(fitting) >= 2 and fitting[-1][0] == row["max_batch_size"]
    # trials in fresh processes: a larger batch never measures less than a smaller one did
    assert fitting[-1][1] >= fitting[0][1] * 0.9


def test_fp32_training_runs_with_tf32_off_in_bench_and_parity(shared_cases):
    _shared(shared_cases, "training_runs_with_the_modes_tf32_setting")


# --- Keras 2 (tf_keras, the ampkit[tf-keras] extra) ---------------------------------------------

needs_tf_keras = pytest.mark.skipif(importlib.util.find_spec("tf_keras") is None,
                                    reason="needs tf_keras (pip install 'ampkit[tf-keras]')")


@needs_tf_keras
def test_keras2_tutorial_custom_loop_and_engine_same_scale_sequence_then_global_policy_and_verify():
    """Then, in the same child, keras_policy_cases.py's scenarios through tf_keras (see test_keras_engine_tf.py)."""
    r = subprocess.run([sys.executable, "-c", "import tf_cases, keras_policy_cases as p; "
                        "tf_cases.keras2_tutorial_loop_matches_engine(); p.tutorial_order(); p.contract()"],
                       cwd=ROOT, capture_output=True, text=True, timeout=900, env={**os.environ, "TF_USE_LEGACY_KERAS": "1"})
    assert r.returncode == 0, f"{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    for line in ("auto ok", "bf16 ok", "fp16 ok", "no policy, no line", "planted ok", "fit refusal ok"):
        assert line in r.stdout, r.stdout
    assert "global tf_keras 2." in r.stdout


@needs_tf_keras
def test_keras2_engine_scope_optimizer_callback_and_train_step():
    _case("keras2_engine_scope_fit_callback")


K2MODELS = textwrap.dedent('''
    import tf_keras as keras
    def small():
        inputs = keras.Input((12,))
        h = keras.layers.Dense(16, activation="relu", name="hidden")(inputs)
        return keras.Model(inputs, keras.layers.Dense(3, dtype="float32", name="logits")(h))
    def hot():
        inputs = keras.Input((12,))
        h = keras.layers.Dense(8, name="first")(inputs)
        h = keras.layers.Rescaling(1e5, name="boom")(h)
        return keras.Model(inputs, keras.layers.Dense(3, name="head")(h))
''')


@needs_tf_keras
def test_keras2_factory_bench_rows_ok_and_audit_names_the_overflow(tmp_path):
    (tmp_path / "k2models.py").write_text(K2MODELS)
    r = _cli("bench", "--framework", "tensorflow", "--model", "k2models:small", "--input-shape", "12",
             "--num-classes", "3", "--modes", "fp32,fp16", "--steps", "2", "--warmup", "1", "--json", "-", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["environment"]["keras"].startswith("tf_keras 2.") and "Keras: tf_keras 2." in r.stderr
    assert [row["mode"] for row in doc["results"]] == ["fp32", "fp16"]
    for row in doc["results"]:
        assert row["status"] == "ok" and row["final_loss"] > 0, row
    audit = ("audit", "--framework", "tensorflow", "--model", "k2models:hot", "--input-shape", "12", "--num-classes", "3")
    r = _cli(*audit, "--mode", "fp16", "--json", "-", cwd=tmp_path)
    assert r.returncode == 1, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["first_nonfinite"]["name"] == "boom" and doc["first_nonfinite"]["phase"] == "forward"
    assert [lay["name"] for lay in doc["layers"]] == ["first", "boom", "head"]
    assert doc["environment"]["keras"].startswith("tf_keras 2.")


@needs_tf_keras
def test_doctor_shows_keras_flavour_and_tf_keras_selftest(tmp_path):
    """Under TF_USE_LEGACY_KERAS=1: tf.keras is tf_keras; the Keras 3 table and tf_keras's self-test both pass."""
    out = tmp_path / "doctor.json"
    r = _cli("doctor", "--framework", "tensorflow", "--quick", "--json", str(out), env={"TF_USE_LEGACY_KERAS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(out.read_text())
    env = doc["environment"]
    assert env["keras_flavour"] == "tf_keras" and env["tf_keras_resolves_to"] == "tf_keras"
    assert env["keras_version"].startswith("3.") and env["tf_keras_version"].startswith("2.")
    assert "tf.keras is tf_keras" in r.stdout and "tf_keras 2." in r.stdout
    for mode in ("fp32", "fp16", "bf16"):
        assert doc["modes"][mode]["selftest"] == "pass", (mode, doc["modes"][mode])
    variant = doc["variants"]["tf_keras"]
    assert {m: v["selftest"] for m, v in variant["modes"].items() if m != "tf32"} == \
        {"fp32": "pass", "fp16": "pass", "bf16": "pass"}, variant
    assert "inf gradient skipped, scale 256 -> 128" in variant["modes"]["fp16"]["detail"]
    assert "tf_keras 2." in r.stdout and "self-test" in r.stdout


@needs_tf_keras
def test_keras2_example_trains_through_tf_keras():
    example = os.path.join(ROOT, "..", "..", "..", "examples", "keras2_custom_loop.py")
    r = subprocess.run([sys.executable, example, "--epochs", "1"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "tf_keras 2." in r.stdout and "tf.keras is tf_keras" in r.stdout, r.stdout
    assert "epoch 1: loss" in r.stdout and "loss scale" in r.stdout, r.stdout


def test_auto_in_bench_and_audit_and_doctor_intervals():
    """--modes fp32,auto runs auto's mode once and marks it; audit --mode auto says what it audited."""
    r = _cli("bench", "--framework", "tensorflow", "--workload", "mlp", "--modes", "auto", "--repeats", "2",
             "--steps", "2", "--warmup", "1", "--json", "-")
    assert r.returncode == 0, r.stderr[-3000:]
    rows = json.loads(r.stdout)["results"]
    auto = [row for row in rows if row["resolved_from"] == "auto"]
    assert len(auto) == 1 == len(rows) and auto[0]["resolved_reason"] and auto[0]["status"] == "ok"
    assert all(row["repeats"] == 2 for row in rows)
    r = _cli("audit", "--framework", "tensorflow", "--mode", "auto", "--json", "-")
    assert r.returncode in (0, 1), r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["resolved_from"] == "auto" and doc["mode"] in ("fp16", "bf16") and "auto resolves to" in doc["note"]
    assert "measured" in doc["note"] and "capability guess" not in doc["note"]  # a CPU measures, never guesses


def test_a_bad_workload_name_is_one_line_before_tensorflow_loads():
    """Refused before TensorFlow is imported, so not even its native start-up notices reach stderr."""
    r = _cli("bench", "--framework", "tensorflow", "--workload", "nope", timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("ampkit: error: unknown workload 'nope'"), r.stderr
