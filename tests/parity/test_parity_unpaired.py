"""Issue #40, after the first round: an interrupted parity keeps every finished run. A seed whose
other modes did not finish cannot be paired, so its runs stay out of the statistics, but they are in
the document (``unpaired_runs``) and ``--resume`` runs only the rest (before: a single-seed parity
stopped during its mixed run dropped the finished fp32 run, and the resume trained it again)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ampkit.parity import grid as G
from ampkit.parity.driver import run_seeds
from ampkit.parity.report import ParityReport, RunRecord
from helpers import default_sigint

FACTORIES = '''
import os
import time

import torch
import torch.nn as nn


class Sleepy(nn.Module):
    """Fast in fp32; under autocast SLEEPY_SECONDS per forward, and a line in sleepy_calls.log."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        if torch.is_autocast_enabled("cpu"):
            time.sleep(float(os.environ.get("SLEEPY_SECONDS", "1")))
            with open("sleepy_calls.log", "a") as f:
                f.write("autocast forward\\n")
        return self.lin(x)


def sleepy():
    return Sleepy()


def blobs():
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 4, (64,), generator=g)
    x = torch.randn(64, 8, generator=g)
    return (x[:48], y[:48]), (x[48:], y[48:])
'''


def _rec(mode, seed):
    return RunRecord(mode, seed, [1.0], [0.5], [1.0], 0, 0.1)


def test_runs_of_a_seed_cut_short_are_kept_apart():
    def train_one(mode, seed, cb):
        if (mode, seed) == ("bf16", 1):
            raise KeyboardInterrupt
        return _rec(mode, seed)

    records = run_seeds(["fp32", "bf16"], [0, 1], train_one)
    assert records.interrupted
    assert [(r.mode, r.seed) for r in records] == [("fp32", 0), ("bf16", 0)]
    assert [(r.mode, r.seed) for r in records.unpaired] == [("fp32", 1)]


def test_unpaired_runs_round_trip_and_count_as_held():
    rep = ParityReport("d", "cpu", [], {}, 0.01, 1, interrupted=True, unpaired_runs=[_rec("fp32", 0)],
                       grid={"modes": ["fp32", "bf16"], "seeds": [0], "identity": {}})
    doc = json.loads(json.dumps(rep.to_dict()))
    assert [r["mode"] for r in doc["unpaired_runs"]] == ["fp32"]
    back = ParityReport.from_dict(doc)
    assert [(r.mode, r.seed) for r in G.runs_of(back)] == [("fp32", 0)]
    assert "unpaired_runs" not in ParityReport("d", "cpu", [], {}, 0.01, 1).to_dict()


@pytest.mark.slow
def test_sigterm_during_the_mixed_run_keeps_fp32_and_resume_runs_only_the_rest(tmp_path):
    (tmp_path / "pfactories.py").write_text(FACTORIES)
    out = tmp_path / "p.json"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    argv = [sys.executable, "-m", "ampkit", "parity", "--device", "cpu", "--model", "pfactories:sleepy", "--data",
            "pfactories:blobs", "--modes", "fp32,bf16", "--seeds", "1", "--steps", "30", "--json", str(out)]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env | {"SLEEPY_SECONDS": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=default_sigint)
    calls, deadline = tmp_path / "sleepy_calls.log", time.time() + 240
    while time.time() < deadline and proc.poll() is None and not calls.exists():  # bf16 is training
        time.sleep(0.2)
    assert proc.poll() is None, proc.stderr.read()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "Traceback" not in err, err[-3000:]
    assert f"1 run(s) of an unfinished seed (--resume {out} runs only the rest)" in err
    doc = json.loads(out.read_text())
    assert doc["interrupted"] is True and doc["results"] == []
    (fp32,) = doc["unpaired_runs"]
    assert (fp32["mode"], fp32["seed"], fp32["error"], len(fp32["train_loss"])) == ("fp32", 0, None, 30)

    # --resume alone: what to train comes from the document; only bf16 runs
    r = subprocess.run([sys.executable, "-m", "ampkit", "parity", "--resume", str(out)], cwd=tmp_path,
                       env=env | {"SLEEPY_SECONDS": "0"}, capture_output=True, text=True, timeout=240)
    assert r.returncode in (0, 1) and "it holds 1 run(s); 1 to run" in r.stderr, r.stderr[-3000:]
    grown = json.loads(out.read_text())
    assert grown["interrupted"] is False and "unpaired_runs" not in grown
    runs = {x["mode"]: x for res in grown["results"] for x in res["runs"]}
    assert set(runs) == {"fp32", "bf16"} and runs["fp32"] == fp32  # kept as it was, never rerun
