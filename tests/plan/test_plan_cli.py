"""Issue #36 on the command line: ``audit --plan`` writes the plan, ``bench|parity --plan`` run it as
the mode ``plan:<default>``, ``ampkit plan`` runs the whole loop, bad plans are one line and exit 2.

Every command runs as ``python -m ampkit`` with tests/plan (the planted models) on the path; the
independent runs of a test go side by side."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from helpers import assert_usage_error

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(os.path.dirname(HERE)), "src")
ATTN = ["--model", "plan_models:attention_net", "--input-shape", "6,8", "--num-classes", "4", "--device", "cpu"]
MLP = ["--model", "plan_models:mlp", "--input-shape", "16", "--num-classes", "4", "--device", "cpu"]


def ampkit(*argv, cwd):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([HERE, SRC]), "AMPKIT_IMAGE_TEST": "skip",
           "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run([sys.executable, "-m", "ampkit", *argv], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=900)


def _plan(path, **doc):
    full = {"kind": "ampkit-plan", "version": 1, "framework": "torch", "default": "fp16", "modules": {"attn": "fp32"}}
    full.update(doc)
    path.write_text(json.dumps(full))
    return str(path)


@pytest.mark.slow
def test_bad_plans_are_one_line_and_exit_2(tmp_path):
    bad_json = tmp_path / "broken.json"
    bad_json.write_text('{"kind": "ampkit-plan", ')
    cases = [
        (["bench", *ATTN, "--modes", "fp32", "--plan", _plan(tmp_path / "a.json", modules={"attn.nope": "fp32"})],
         "entry 'attn.nope' matches no module"),
        (["parity", "--model", "plan_models:attention_net", "--data", "plan_models:attention_parity_data", "--modes", "fp32",
          "--device", "cpu", "--plan", _plan(tmp_path / "b.json", modules={"blocks.*.attn": "fp32"})],
         "entry 'blocks.*.attn' matches no module"),
        (["bench", *ATTN, "--plan", _plan(tmp_path / "c.json", modules={"attn": "fp12"})],
         "entry 'attn': unknown or unsupported mode 'fp12'"),
        (["bench", *ATTN, "--framework", "torch", "--plan", _plan(tmp_path / "d.json", framework="tensorflow")],
         "is for framework 'tensorflow'"),
        (["parity", "--framework", "torch", "--plan", str(bad_json)], "not JSON"),
        (["bench", *ATTN, "--plan", str(tmp_path / "missing.json")], "no such file"),
    ]
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda c: ampkit(*c[0], cwd=tmp_path), cases))
    for (_, needle), r in zip(cases, results):
        assert_usage_error(r, needle)


@pytest.mark.slow
def test_audit_writes_the_plan_and_bench_and_parity_run_it(tmp_path):
    r = ampkit("audit", *ATTN, "--mode", "fp16", "--plan", "plan.json", cwd=tmp_path)
    assert r.returncode == 1, r.stderr  # the audit found the inf/NaN (exit 1), and proposes the cure
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["kind"] == "ampkit-plan" and plan["default"] == "fp16" and plan["framework"] == "torch"
    assert plan["modules"] == {"attn": "fp32"}
    assert "from_plan('plan.json', model=model)" in r.stdout
    runs = [("bench", *ATTN, "--modes", "fp32,fp16", "--plan", "plan.json", "--steps", "3", "--warmup", "1",
             "--json", "b.json"),
            ("parity", "--model", "plan_models:attention_net", "--data", "plan_models:attention_parity_data", "--modes",
             "fp32,fp16", "--device", "cpu", "--plan", "plan.json", "--seeds", "2", "--steps", "4", "--json", "p.json")]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda argv: ampkit(*argv, cwd=tmp_path), runs))
    bench = {row["mode"]: row for row in json.loads((tmp_path / "b.json").read_text())["results"]}
    assert bench["plan:fp16"]["status"] == "ok" and bench["plan:fp16"]["plan"]["modules"] == {"attn": "fp32"}
    assert bench["fp16"]["status"] == "error" and "nan" in bench["fp16"]["error"]
    parity = {row["mode"]: row for row in json.loads((tmp_path / "p.json").read_text())["results"]}
    assert parity["plan:fp16"]["nonfinite_seeds"] == 0 and parity["plan:fp16"]["plan"]["default"] == "fp16"
    assert parity["fp16"]["nonfinite_seeds"] == 2


TINY = ["--steps", "3", "--warmup", "1", "--seeds", "2", "--parity-steps", "4"]


@pytest.mark.slow
def test_ampkit_plan_on_the_planted_model(tmp_path):
    r = ampkit("plan", *ATTN, "--data", "plan_models:attention_parity_data", "--modes", "fp16", *TINY,
               "--out", "attn.json", "--json", "attn-doc.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    # fp16 alone goes non-finite; the plan keeps attn in fp32 and trains finite, not worse than fp32
    doc = json.loads((tmp_path / "attn-doc.json").read_text())
    assert doc["command"] == "plan" and doc["plan"]["modules"] == {"attn": "fp32"}
    tried = doc["tried"][0]
    assert tried["finite"] is True and tried["parity"] != "not_equivalent" and tried["speedup"] is not None
    assert tried["island_price"] is not None  # bench with and without the island
    assert doc["plan"]["evidence"]["bench"]["island_price"] == tried["island_price"]
    assert json.loads((tmp_path / "attn.json").read_text()) == doc["plan"]
    if doc["status"] == "none_faster":  # an honest answer on a CPU without fast fp16, with the figures
        assert "no mode is faster than fp32" in r.stdout and "samples/s" in r.stdout
    else:
        assert doc["status"] == "accepted" and tried["speedup_verdict"] == "faster"
    assert "from_plan('attn.json', model=model)" in r.stdout
    rep = ampkit("report", "attn-doc.json", "--markdown", "-", cwd=tmp_path)
    assert rep.returncode == 0 and "**plan** plan_models:attention_net" in rep.stdout and "`attn` in fp32" in rep.stdout


@pytest.mark.slow
def test_ampkit_plan_on_a_clean_model_is_the_plain_fastest_mode(tmp_path):
    r = ampkit("plan", *MLP, "--data", "plan_models:mlp_parity_data", "--modes", "bf16,fp16", *TINY,
               "--out", "mlp.json", "--json", "mlp-doc.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((tmp_path / "mlp-doc.json").read_text())
    assert doc["plan"]["modules"] == {}
    fastest = max((o for o in doc["order"] if o["mode"] != "fp32"), key=lambda o: o["samples_per_s"] or 0)
    assert doc["plan"]["default"] == fastest["mode"]
