"""Issue #11: Ctrl-C and SIGTERM keep the work that finished, stop every child, exit non-zero."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from user_faults import write_user_files

from helpers import default_sigint


def _group_gone(pgid: int, within: float = 15.0) -> bool:
    """No process of the run's process group is left (children, the resource tracker)."""
    deadline = time.time() + within
    while time.time() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def _start(argv, cwd, **extra_env) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")} | extra_env
    return subprocess.Popen([sys.executable, "-m", "ampkit", *argv], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=default_sigint)


@pytest.mark.parametrize("sig, to_group, code", [(signal.SIGTERM, False, 143), (signal.SIGINT, True, 130)],
                         ids=["sigterm-to-ampkit", "ctrl-c-to-group"])
def test_bench_interrupted_keeps_finished_rows(tmp_path, sig, to_group, code):
    """fp32's steps are fast; bf16 sleeps 4 s a step (the 'sleepy' model): the signal lands in bf16's
    block of the first interleaved round (as soon as bf16's first step has started), after fp32
    finished its own -- fp32's round is kept (its idle child is asked for its row), bf16, cut in its
    block, has no round and no row."""
    write_user_files(tmp_path)
    out = tmp_path / "partial.json"
    proc = _start(["bench", "--device", "cpu", "--model", "tmodels:sleepy", "--input-shape", "8", "--num-classes",
                   "4", "--modes", "fp32,bf16", "--batch-size", "4", "--steps", "20", "--warmup", "0",
                   "--json", str(out), "--csv", str(tmp_path / "partial.csv")], tmp_path)
    seen, deadline = "", time.time() + 240
    while time.time() < deadline:
        line = proc.stderr.readline()  # the progress lines: not a terminal
        seen += line
        if re.search(r"fp32: step 1/\d+ done", line) or not line:  # 1/10: the first of two sets of processes
            break
    assert re.search(r"fp32: step 1/\d+ done", seen), seen
    started = tmp_path / "sleepy_started.log"  # bf16's first step: fp32's block of round 1 is done
    while time.time() < deadline and not started.exists() and proc.poll() is None:
        time.sleep(0.05)
    assert started.exists() and proc.poll() is None, proc.stderr.read()
    if to_group:
        os.killpg(proc.pid, sig)  # a terminal's Ctrl-C reaches every process of the group
    else:
        proc.send_signal(sig)  # timeout(1), Kubernetes: only ampkit itself is told
    out_text, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err[-3000:]
    assert "fp32: ok" in out_text, out_text  # with --json PATH the human lines are on stdout
    assert "Traceback" not in err, err[-3000:]
    doc = json.loads(out.read_text())
    assert doc["interrupted"] is True
    assert [r["mode"] for r in doc["results"]] == ["fp32"] and doc["results"][0]["status"] == "ok"
    assert (tmp_path / "partial.csv").read_text().count("\n") == 2  # header and the fp32 row
    assert _group_gone(proc.pid), "a child of the interrupted bench is still running"
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_parity_sigterm_keeps_finished_seeds(tmp_path):
    out = tmp_path / "parity.json"
    proc = _start(["parity", "--device", "cpu", "--modes", "fp32,bf16", "--seeds", "1000", "--epochs", "1",
                   "--json", str(out), "--plot", str(tmp_path / "curves.png")], tmp_path)
    seen, deadline = "", time.time() + 240
    while time.time() < deadline:  # imports, then one seed after another (each a second or two)
        line = proc.stderr.readline()  # progress lines: "parity: seed 0 (1/1000), bf16 done [...]"
        seen += line
        if "bf16 done" in line or not line:
            break
    assert "bf16 done" in seen, seen
    time.sleep(1)  # into the next seed
    assert proc.poll() is None, seen + proc.stderr.read()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    err = seen + err
    assert proc.returncode == 143, err[-3000:]
    assert "Traceback" not in err and "terminated (SIGTERM)" in err, err[-3000:]
    doc = json.loads(out.read_text())
    assert doc["interrupted"] is True
    results = {r["mode"]: r for r in doc["results"]}
    assert set(results) == {"fp32", "bf16"}
    seeds = results["fp32"]["seeds"]
    assert 1 <= len(seeds) < 1000 and results["bf16"]["seeds"] == seeds  # complete seeds only, paired
    assert (tmp_path / "curves.png").stat().st_size > 0
    assert _group_gone(proc.pid)


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)],
                         ids=["sigterm-to-group", "ctrl-c-to-group"])
def test_audit_interrupted_keeps_finished_steps(tmp_path, sig, code):
    """Each audited step of the 'sleepy' model takes 1 s under autocast; the signal lands after two
    steps, on the whole process group as timeout(1) and a terminal send it (so the audit's child
    gets it too): the audit finishes the step it is in, writes those steps, says it was interrupted."""
    write_user_files(tmp_path)
    out = tmp_path / "audit.json"
    proc = _start(["audit", "--device", "cpu", "--model", "tmodels:sleepy", "--input-shape", "8", "--num-classes",
                   "4", "--mode", "bf16", "--steps", "50", "--json", str(out)], tmp_path, SLEEPY_SECONDS="1")
    calls, deadline = tmp_path / "sleepy_calls.log", time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if calls.exists() and calls.read_text().count("\n") >= 2:  # two audited steps are done
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.stderr.read()
    os.killpg(proc.pid, sig)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == code, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    doc = json.loads(out.read_text())
    assert doc["interrupted"] is True and doc["steps"] == 50
    done = doc["steps_completed"]
    assert 2 <= done < 50, done
    assert f"kept the {done} audited step(s)" in err, err[-2000:]
    assert calls.read_text().count("\n") == done, "a step the report counts did not run, or the other way round"
    names = {lay["name"] for lay in doc["layers"]}
    assert "lin" in names and all(lay["calls"] == done for lay in doc["layers"] if lay["name"] == "lin")
    assert _group_gone(proc.pid), "the audit's child is still running"
