"""Issue #40, after the first round: a broken torchao install (found, but its import raises) is said
in one line before any work -- exit 2 where fp8 was asked for (parity, audit), an ``unsupported`` fp8
row with the reason in bench -- instead of fp8 "fail: worse" after the fp32 seeds trained."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ampkit.backends.torch.engine import fp8 as fp8_engine
from helpers import TINY_DATA_SOURCE

BROKEN = 'raise RuntimeError("torchao was built for another torch: undefined symbol _ZN3c10")\n'
WHY = "(import failed: RuntimeError: torchao was built for another torch: undefined symbol _ZN3c10)"

FACTORIES = '''
import torch
import torch.nn as nn


def model():
    with open("model_calls.log", "a") as f:
        f.write("called\\n")
    return nn.Linear(8, 4)
''' + TINY_DATA_SOURCE


def test_fp8_support_says_why_a_found_torchao_cannot_be_used(monkeypatch):
    def broken():
        raise fp8_engine.ModeUnavailableError(f"{fp8_engine.FP8_EXTRA} (import failed: RuntimeError: broken)")

    fp8_engine.torchao_import_error.cache_clear()
    monkeypatch.setattr(fp8_engine, "torchao_installed", lambda: True)
    monkeypatch.setattr(fp8_engine, "_torchao_float8", broken)
    try:
        ok, emulated, why = fp8_engine.fp8_support("cpu")
        assert (ok, emulated) == (False, False) and why.endswith("(import failed: RuntimeError: broken)")
    finally:
        fp8_engine.torchao_import_error.cache_clear()


@pytest.fixture
def broken_torchao(tmp_path):
    (tmp_path / "site" / "torchao").mkdir(parents=True)
    (tmp_path / "site" / "torchao" / "__init__.py").write_text(BROKEN)
    (tmp_path / "fx.py").write_text(FACTORIES)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "site"), env.get("PYTHONPATH", "")])
    return tmp_path, env


def _ampkit(args, cwd, env):
    return subprocess.run([sys.executable, "-m", "ampkit", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=240)


@pytest.mark.parametrize("args, words", [
    (["parity", "--model", "fx:model", "--data", "fx:data", "--modes", "fp32,fp8", "--seeds", "2", "--steps", "2"],
     "ampkit: error: mode 'fp8' cannot run on cpu: fp8 training needs torchao"),
    (["audit", "--mode", "fp8", "--json", "a.json"], "ampkit: error: --mode fp8 cannot run on cpu with torch"),
], ids=["parity", "audit"])
def test_fp8_asked_for_with_a_broken_torchao_is_one_line_before_any_work(broken_torchao, args, words):
    folder, env = broken_torchao
    r = _ampkit([*args, "--device", "cpu"], folder, env)
    assert r.returncode == 2, r.stderr[-3000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(words) and lines[0].endswith(WHY), r.stderr[-3000:]
    assert not (folder / "model_calls.log").exists()  # no factory called, nothing trained
    assert not (folder / "a.json").exists()


@pytest.mark.slow
def test_bench_keeps_fp32_and_says_why_fp8_is_unsupported(broken_torchao):
    folder, env = broken_torchao
    r = _ampkit(["bench", "--device", "cpu", "--modes", "fp32,fp8", "--steps", "2", "--warmup", "0",
                 "--json", "b.json"], folder, env)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = {row["mode"]: row for row in json.loads((folder / "b.json").read_text())["results"]}
    assert rows["fp32"]["status"] == "ok"
    assert rows["fp8"]["status"] == "unsupported" and rows["fp8"]["error"].endswith(WHY)
