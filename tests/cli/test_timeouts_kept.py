"""Issue #40, after the first round: ``audit --timeout`` keeps what was measured, as bench keeps a
timed-out mode as a row -- a JSON document marked interrupted, with the reason, exit 1 -- while a
factory that never gets going (hangs while building the model) stays one usage line, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from user_faults import write_user_files


def _run(argv, cwd, timeout=240, **env):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")} | env
    return subprocess.run([sys.executable, "-m", "ampkit", *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, start_new_session=True)


@pytest.mark.slow
def test_audit_timeout_keeps_the_finished_steps_in_a_document(tmp_path):
    """The 'sleepy' model takes 1 s per audited step: past --timeout the audit finishes the step it
    is in and writes those steps (before: exit 2, one line, no document)."""
    write_user_files(tmp_path)
    out = tmp_path / "a.json"
    t0 = time.monotonic()
    r = _run(["audit", "--device", "cpu", "--model", "tmodels:sleepy", "--input-shape", "8", "--num-classes", "4",
              "--mode", "bf16", "--steps", "500", "--timeout", "12", "--json", str(out)], tmp_path, SLEEPY_SECONDS="1")
    assert r.returncode == 1, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    assert time.monotonic() - t0 < 12 + 6 + 60  # the timeout, the grace for the step in flight, start-up
    doc = json.loads(out.read_text())
    assert doc["interrupted"] is True and doc["steps"] == 500
    assert "stopped at --timeout 12 s" in doc["error"]
    done = doc["steps_completed"]
    assert 1 <= done < 500, done
    assert (tmp_path / "sleepy_calls.log").read_text().count("\n") == done
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("ampkit: auditing")] == [
        f"ampkit: auditing tmodels:sleepy: stopped at --timeout 12 s; what finished is kept; "
        f"kept the {done} audited step(s) that finished"]


def test_audit_factory_that_hangs_past_timeout_is_one_line(tmp_path):
    """Nothing started (the factory itself hangs): no document to keep, the usage line as before."""
    write_user_files(tmp_path)
    r = _run(["audit", "--device", "cpu", "--model", "tmodels:hang", "--input-shape", "8", "--timeout", "3",
              "--json", "a.json"], tmp_path)
    assert r.returncode == 2, r.stderr[-3000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("ampkit: error: auditing tmodels:hang: no result after 3 s")
    assert not (tmp_path / "a.json").exists()


def test_a_timed_out_audit_report_round_trips_and_fails():
    from ampkit.audit.report import AuditReport

    rep = AuditReport("bf16", 1.0, [], None, [], "cpu", 5, steps_completed=0, interrupted=True,
                      error="auditing m:f: stopped at --timeout 3 s; it did not answer, nothing is kept")
    doc = rep.to_dict()
    assert doc["error"].startswith("auditing m:f") and doc["verdict"] == "not_measured" and rep.failed
    back = AuditReport.from_dict(json.loads(json.dumps(doc)))
    assert back.error == rep.error and back.interrupted and back.failed
    assert "error" not in AuditReport("bf16", 1.0, [], None, [], "cpu", 1).to_dict()
