"""Assertions shared by the tests (tests/ is on sys.path under pytest's default import mode)."""

from __future__ import annotations


def assert_usage_error(result, needle: str) -> None:
    """A CompletedProcess that failed as bad input must: exit 2, print exactly one line
    ``ampkit: error: ...`` naming ``needle`` on stderr, and no traceback."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ampkit: error: ") and needle in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def default_sigint() -> None:
    """``preexec_fn`` for a process a test will Ctrl-C: SIGINT back to its default action. A shell
    starts background jobs with SIGINT ignored, and an ignored signal stays ignored across exec, so
    without this an ampkit under a backgrounded pytest would never see the test's Ctrl-C."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


#: the source of a data factory for parity's ``--data MODULE:FACTORY``: 32 samples of 8 features, 4
#: classes, 24 to train and 8 to test, the same every call (tests write it into a module with their model)
TINY_DATA_SOURCE = """
def data():
    import torch

    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 4, (32,), generator=g)
    x = torch.randn(32, 8, generator=g)
    return (x[:24], y[:24]), (x[24:], y[24:])
"""


def record_scaler_history(scaler, out: list) -> None:
    """Wrap ``scaler.update`` to append ``(found_inf, scale after)`` for each update: a GradScaler's own
    history, read apart from ampkit (found_inf from its per-optimizer state)."""
    update = scaler.update

    def recorded(*a, **k):
        found = sum(float(v.sum()) for st in scaler._per_optimizer_states.values()
                    for v in st["found_inf_per_device"].values())
        update(*a, **k)
        out.append((found > 0, scaler.get_scale()))
    scaler.update = recorded


def keras_child(script: str, out) -> dict:
    """Run a Keras case script (TensorFlow stays out of the pytest process) with ``out`` as its argument;
    its ``RESULT {json}`` line, parsed."""
    import json
    import os
    import subprocess
    import sys

    r = subprocess.run([sys.executable, script, str(out)], cwd=os.path.dirname(script), capture_output=True,
                       text=True, timeout=600,
                       env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow"})
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert r.returncode == 0 and line, r.stdout[-2000:] + r.stderr[-4000:]
    return json.loads(line[0][len("RESULT "):])
