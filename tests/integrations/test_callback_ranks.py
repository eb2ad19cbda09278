"""The trainer callbacks in a multi-process run: one document for the run, written by rank 0 after
gathering every rank's record; the origin is the rank whose own forward went non-finite, a rank
that only received NaN through the gradient all-reduce is marked ``received`` and never named.

Two real two-process CPU runs (gloo), each a child process so that this one keeps no process
group: ``torchrun --nproc_per_node 2`` with the HF Trainer (bf16) and Lightning ``strategy="ddp"``
(which starts the second process itself; the launching process is rank 0). Both overflow on
rank 1 only, from global step 5 on. Lightning ``ddp_spawn`` too: the launching process's callback
gets rank 0's record back with Lightning's own worker results.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ampkit.integrations.ranks import merge_rank_documents, roles

HERE = Path(__file__).parent


def _first(name, phase, step, rank):
    return {"name": name, "phase": phase, "step": step, "rank": rank}


def test_roles_origin_received_also_clean_undecided():
    fwd, bwd = _first("attn", "forward", 5, 1), _first("head", "backward", 5, 0)
    assert roles({0: bwd, 1: fwd, 2: None}) == (
        1, {0: "received", 1: "origin", 2: "clean"},
        "rank 1 went non-finite first, at step 5 in the forward of attn; rank(s) [0] only received it through the "
        "collectives (gradient all-reduce, then synced weights)")
    # a later step on another rank, even in its forward: received (the weights were synced non-finite)
    assert roles({0: _first("emb", "forward", 6, 0), 1: fwd})[1] == {0: "received", 1: "origin"}
    assert roles({0: _first("emb", "forward", 5, 0), 1: fwd})[:2] == (0, {0: "origin", 1: "also"})
    origin, role, why = roles({0: bwd, 1: _first("head", "backward", 5, 1)})
    assert origin is None and role == {0: "undecided", 1: "undecided"} and "cannot be told apart" in why
    merged = merge_rank_documents([{"first_nonfinite": bwd, "findings": [{"kind": "nonfinite", "advice": "x"}]},
                                   {"first_nonfinite": _first("head", "backward", 5, 1)}])
    assert merged["first_nonfinite"]["rank"] is None and "cannot be told apart" in merged["findings"][0]["advice"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(cmd, tmp) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                       os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_port())}
    proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _check(tmp: Path, origin_name: str, victim_name: str) -> dict:
    doc = json.loads((tmp / "run.json").read_text())
    first = doc["first_nonfinite"]  # and the origin's "op"/"in_reference" (#34)
    assert {k: first.get(k) for k in ("name", "phase", "step", "rank")} == \
        {"name": origin_name, "phase": "forward", "step": 5, "rank": 1}
    assert doc["world_size"] == 2
    roles_ = {r["rank"]: r for r in doc["ranks"]}
    assert roles_[1]["role"] == "origin" and roles_[0]["role"] == "received"
    assert roles_[0]["first_nonfinite"]["name"] == victim_name and roles_[0]["first_nonfinite"]["phase"] == "backward"
    # the victim is named nowhere as the origin: not in the finding, the note, or rank 0's own file's role
    assert [f["layer"] for f in doc["findings"] if f["kind"] == "nonfinite"] == [origin_name]
    assert victim_name not in doc["note"] and doc["summary"]["first_nonfinite"]["rank"] == 1
    own0 = json.loads((tmp / "run.rank0.json").read_text())
    assert own0["role"] == "received" and own0["rank"] == 0
    assert json.loads((tmp / "run.rank1.json").read_text())["role"] == "origin"
    return doc


@pytest.mark.slow
def test_torchrun_hf_trainer_names_rank_1s_module(tmp_path):
    proc = _child([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                   str(_port()), str(HERE / "ddp_hf_run.py"), str(tmp_path)], tmp_path)
    out = proc.stdout + proc.stderr
    # the summary line once (rank 0), and no rank's own failure line names the victim as the first inf/NaN
    assert out.count("AmpkitCallback (transformers Trainer): 8 steps in bf16") == 1
    assert "first inf/NaN at step 5 in the backward of classifier" not in out
    _check(tmp_path, "bert.encoder.layer.1.intermediate.intermediate_act_fn.1", "classifier")
    s0 = json.loads((tmp_path / "summary0.json").read_text())["summary"]
    s1 = json.loads((tmp_path / "summary1.json").read_text())["summary"]
    assert s0["first_nonfinite"]["rank"] == 1 and "rank 1 went non-finite first" in s0["cross_rank"]
    assert s1["first_nonfinite"]["rank"] == 1      # rank 1's own record: its own first, with its rank


@pytest.mark.slow
def test_lightning_ddp_names_rank_1s_module_and_the_launcher_has_the_summary(tmp_path):
    proc = _child([sys.executable, str(HERE / "ddp_lightning_run.py"), str(tmp_path)], tmp_path)
    _check(tmp_path, "net.2", "net.3")
    summary = json.loads((tmp_path / "summary.json").read_text())["summary"]
    first = summary["first_nonfinite"]  # and the origin's "op"/"in_reference" (#34)
    assert {k: first.get(k) for k in ("name", "phase", "step", "rank")} == \
        {"name": "net.2", "phase": "forward", "step": 5, "rank": 1}
    # the summary line is said once (rank 0), not once per rank
    assert (proc.stdout + proc.stderr).count("AmpkitCallback (Lightning Trainer): 8 steps") == 1


@pytest.mark.slow
def test_lightning_ddp_spawn_carries_the_record_back_to_the_launching_process(tmp_path):
    # under ddp_spawn the launching process's callback sees no event: rank 0's record comes back with
    # Lightning's own worker results; summary.json is written by the launching process only
    _child([sys.executable, str(HERE / "ddp_lightning_run.py"), str(tmp_path), "ddp_spawn"], tmp_path)
    _check(tmp_path, "net.2", "net.3")
    got = json.loads((tmp_path / "summary.json").read_text())
    first = got["summary"]["first_nonfinite"]  # and the origin's "op"/"in_reference" (#34)
    assert {k: first.get(k) for k in ("name", "phase", "step", "rank")} == \
        {"name": "net.2", "phase": "forward", "step": 5, "rank": 1}
    assert got["ledger"]["steps"] == 8 and got["summary"]["steps"] == 8
