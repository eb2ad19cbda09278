"""Issue #40: a write that fails at the end never costs the other outputs or the results.

Each output is written on its own; one the OS refuses (a full disk — stdout on ``/dev/full`` —,
its folder removed mid-run, the target turned into a folder mid-run) is one line naming the path
and the OS reason, and the same output goes to a fallback file named in that line; the exit code
is 1. A ``--json`` that is a symlink is written through to its target.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

FAST = ["--device", "cpu", "--input-shape", "8", "--num-classes", "4", "--modes", "fp32", "--steps", "2",
        "--warmup", "0"]

MUTATING = '''
import os
import shutil

import torch.nn as nn


def model():
    return nn.Sequential(nn.Flatten(), nn.Linear(8, 4))


def removes_folder():
    """Runs after ampkit checked its outputs: the folder of --json disappears mid-run."""
    shutil.rmtree(os.environ["DOOMED_DIR"], ignore_errors=True)  # ampkit may call a factory more than once
    return model()


def turns_target_into_folder():
    """The --json target is replaced by a folder mid-run."""
    if os.path.isfile(os.environ["DOOMED_FILE"]):
        os.remove(os.environ["DOOMED_FILE"])
        os.mkdir(os.environ["DOOMED_FILE"])
    return model()
'''


def _ampkit(args, cwd, env=None, stdout=subprocess.PIPE):
    full = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "ampkit", *args], cwd=cwd, env=full, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=300, stdin=subprocess.DEVNULL)


def _error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("ampkit: error:")]


@pytest.fixture
def user_dir(tmp_path):
    (tmp_path / "mutating.py").write_text(MUTATING)
    return tmp_path


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_json_to_a_full_stdout_keeps_the_csv_and_saves_the_document(user_dir):
    with open("/dev/full", "w") as full:
        r = _ampkit(["bench", "--model", "mutating:model", *FAST, "--json", "-", "--csv", "rows.csv"], user_dir,
                    stdout=full)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    [line] = _error_lines(r.stderr)
    fallback = str(user_dir / "ampkit-bench.json")
    assert "could not write --json to stdout (No space left on device)" in line and fallback in line, line
    doc = json.loads((user_dir / "ampkit-bench.json").read_text())
    assert doc["command"] == "bench" and doc["results"][0]["status"] == "ok"
    rows = (user_dir / "rows.csv").read_text().splitlines()
    assert rows[0].startswith("mode,") and rows[1].startswith("fp32,")


def test_outputs_lost_mid_run_go_to_fallbacks_and_the_healthy_one_is_written(user_dir):
    doomed = user_dir / "doomed"
    doomed.mkdir()
    target = user_dir / "b.json"
    target.write_text("old")
    env = {"DOOMED_DIR": str(doomed)}
    r = _ampkit(["bench", "--model", "mutating:removes_folder", *FAST, "--json", str(doomed / "b.json"),
                 "--csv", "healthy.csv"], user_dir, env)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    [line] = _error_lines(r.stderr)
    assert f"could not write --json to {str(doomed / 'b.json')!r} (No such file or directory)" in line, line
    # in the working folder, where b.json already exists: the fallback takes a name of its own
    saved = line.rsplit("wrote it to ", 1)[1].split(" instead")[0]
    assert os.path.dirname(saved) == str(user_dir) and saved != str(target) and target.read_text() == "old"
    assert json.loads(open(saved).read())["results"][0]["mode"] == "fp32"
    assert (user_dir / "healthy.csv").read_text().startswith("mode,")

    # the --plot target turned into a folder: the JSON is still written, the plot goes elsewhere
    plot = user_dir / "p.png"
    plot.write_bytes(b"")
    r = _ampkit(["bench", "--model", "mutating:turns_target_into_folder", *FAST, "--plot", str(plot), "--json",
                 "ok.json"], user_dir, {"DOOMED_FILE": str(plot)})
    assert r.returncode == 1, r.stderr[-2000:]
    [line] = _error_lines(r.stderr)
    assert f"could not write --plot to {str(plot)!r}" in line, line
    alt = line.rsplit("wrote it to ", 1)[1].split(" instead")[0]
    assert open(alt, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert json.loads((user_dir / "ok.json").read_text())["command"] == "bench"


def test_json_through_a_symlink_writes_its_target(user_dir):
    real = user_dir / "store"
    real.mkdir()
    (real / "b.json").write_text("{}")
    link = user_dir / "b.json"
    link.symlink_to(real / "b.json")
    r = _ampkit(["bench", "--model", "mutating:model", *FAST, "--json", str(link)], user_dir)
    assert r.returncode == 0, r.stderr[-2000:]
    assert link.is_symlink() and os.readlink(link) == str(real / "b.json")
    assert json.loads((real / "b.json").read_text())["command"] == "bench"


def test_report_keeps_the_markdown_when_the_charts_cannot_be_written(tmp_path, monkeypatch):
    """report --markdown with --plots on a full disk: the PNGs are one line, the Markdown is written;
    --html on a full stdout-less disk: a fallback page."""
    import errno

    from ampkit.cli import main as cli
    from ampkit.render import charts

    doc = {"ampkit_version": "0.1.0", "command": "bench", "environment": {"framework": "torch", "device_name": "cpu"},
           "workload": "mlp", "framework": "torch", "device": "cpu", "world_size": 1,
           "results": [{"mode": m, "status": "ok", "error": None, "batch_size": 8, "samples_per_s": s,
                        "step_ms": {"p50": 1000 * 8 / s, "p90": 1000 * 8 / s}, "peak_memory_bytes": 1,
                        "max_batch_size": None, "speedup_vs_fp32": s / 100, "memory_saving_vs_fp32": None,
                        "skipped_steps": 0, "final_loss": 1.0, "tflops": None, "mfu": None}
                       for m, s in (("fp32", 100.0), ("bf16", 150.0))]}
    (tmp_path / "b.json").write_text(json.dumps(doc))
    monkeypatch.chdir(tmp_path)

    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(charts, "save", full)
    rc = cli.main(["report", "b.json", "--markdown", "r.md", "--plots", "pngs"])
    assert rc == 1
    text = (tmp_path / "r.md").read_text()
    assert "bf16" in text and "fp32" in text


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_a_device_output_is_written_into_never_replaced(user_dir):
    """issue #40: the atomic rename replaced a device (/dev/null, /dev/full) given as an output by a file.
    A null device of our own in the test's folder (never the machine's /dev/null) stands for it."""
    import stat

    null = user_dir / "null.json"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    r = _ampkit(["bench", "--model", "mutating:model", *FAST, "--json", str(null), "--csv", "rows.csv"], user_dir)
    assert r.returncode == 0, r.stderr[-2000:]
    assert stat.S_ISCHR(os.stat(null).st_mode), "the device was replaced by a file"
    assert (user_dir / "rows.csv").read_text().startswith("mode,")


def test_a_closed_stdout_is_salvaged_not_a_traceback(user_dir):
    r = subprocess.run([sys.executable, "-m", "ampkit", "bench", "--model", "mutating:model", *FAST, "--json", "-"],
                       cwd=user_dir, stderr=subprocess.PIPE, text=True, timeout=300, stdin=subprocess.DEVNULL,
                       preexec_fn=lambda: os.close(1))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    [line] = _error_lines(r.stderr)
    assert "could not write --json to stdout" in line and "ampkit-bench.json" in line, line
    assert json.loads((user_dir / "ampkit-bench.json").read_text())["command"] == "bench"
