"""Issue #40: parity isolates the user's factories like bench and audit, and reads iterable data.

A ``--model``/``--data`` factory that exits (0 or 3), aborts, hangs or raises KeyboardInterrupt is
one line naming it, exit 2, before any training (it is called first in a child process); a run
that outlasts ``--timeout`` fails its mode and the others go on; an ``IterableDataset`` without
``__len__`` trains (finite: read to its end; endless: needs ``--steps``, said in one line).
"""

from __future__ import annotations

import os

import parity_factories as pf
import pytest

import ampkit
from ampkit.backends.torch import parity as torch_parity
from ampkit.backends.torch import parity_data
from ampkit.cli.main import main

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def in_here(monkeypatch):
    monkeypatch.chdir(HERE)


@pytest.mark.parametrize("model, data, extra, needle", [
    ("normalized_head", "exits_zero", [], "calling parity_factories:exits_zero() failed: it called sys.exit(0)"),
    ("exits_three", "blobs", [], "calling parity_factories:exits_three() failed: it called sys.exit(3)"),
    ("interrupts", "blobs", [], "calling parity_factories:interrupts() failed: it raised KeyboardInterrupt"),
    ("normalized_head", "aborts", [], "parity_factories:aborts() then --model parity_factories:normalized_head() "
                                      "(in a child process): the process was killed by SIGABRT"),
    ("hangs", "blobs", ["--timeout", "3"], "no result after 3 s (--timeout)"),
])
def test_a_factory_that_exits_aborts_hangs_or_interrupts_is_one_line_before_training(
        in_here, capsys, monkeypatch, model, data, extra, needle):
    monkeypatch.setattr(torch_parity, "train_one", lambda *a, **k: pytest.fail("trained despite a bad factory"))
    rc = main(["parity", "--device", "cpu", "--modes", "fp32,bf16", "--seeds", "1", "--model",
               f"parity_factories:{model}", "--data", f"parity_factories:{data}", *extra])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_a_run_past_its_timeout_fails_its_mode_and_the_others_go_on():
    import time

    t0 = time.monotonic()
    rep = ampkit.parity(model=pf.Sleepy, data=pf.blobs, modes="fp32,bf16", seeds=1, epochs=1, device="cpu",
                        timeout=3)
    took = time.monotonic() - t0
    errors = [r.runs[0].error for r in rep.results]
    assert took < 58, (took, errors)  # unstopped, the two runs would sleep 30 s each at least
    assert [r.mode for r in rep.results] == ["fp32", "bf16"]  # the second run ran after the first timed out
    assert all(e and "took longer than --timeout 3 s and was stopped" in e for e in errors), errors


def test_iterable_data_of_unknown_length_trains(monkeypatch):
    """A finite IterableDataset without __len__ (and one inside a DataLoader) is read to its end; an
    endless one trains with --steps and is refused without it (one line naming the fix)."""
    rep = ampkit.parity(model=pf.normalized_head, data=pf.finite_iterable, modes="fp32", seeds=1, epochs=1,
                        device="cpu")
    run = rep.results[0].runs[0]
    assert not run.error and len(run.train_loss) >= 1
    rep = ampkit.parity(model=pf.normalized_head, data=pf.endless_iterable, modes="fp32", seeds=1, steps=3,
                        device="cpu")
    assert not rep.results[0].runs[0].error
    monkeypatch.setattr(parity_data, "ENDLESS_BATCHES", 20)
    with pytest.raises(ampkit.UsageError if hasattr(ampkit, "UsageError") else Exception,
                       match=r"the train data is an iterable of unknown length that did not end after 20 batches.*"
                             r"give --steps N"):
        ampkit.parity(model=pf.normalized_head, data=pf.endless_iterable, modes="fp32", seeds=1, epochs=1,
                      device="cpu")


def test_when_fp32_fails_too_the_mixed_mode_is_not_blamed():
    """NaN in the inputs: fp32 goes non-finite as well, so bf16 is 'inconclusive: fp32 failed too', never
    'fail: worse'."""
    import torch

    x, y = torch.randn(64, 8), torch.randint(0, 4, (64,))
    x[5, 3] = float("nan")
    rep = ampkit.parity(lambda: torch.nn.Linear(8, 4), (x, y), (x[:16], y[:16]), modes="fp32,bf16", seeds=2,
                        epochs=1, device="cpu")
    bf16 = rep.results[1]
    assert bf16.verdict == "inconclusive" and bf16.reason.startswith("fp32 failed too on the same data"), bf16.reason
    assert "not a precision problem" in bf16.reason and bf16.equivalence["verdict"] == "inconclusive"


def test_fp8_with_no_layer_converted_is_not_measured_not_pass(tmp_path):
    """A model with no convertible Linear: fp8's runs are bf16 by another name -- 'not_measured', never
    'pass, equivalent'; the document round-trips through ampkit report."""
    import json

    import torch

    pytest.importorskip("torchao")
    from ampkit.report import build, load_all

    x, y = torch.randn(64, 8), torch.randint(0, 4, (64,))
    rep = ampkit.parity(lambda: torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)),
                        (x, y), (x[:16], y[:16]), modes="fp32,fp8", seeds=2, epochs=1, device="cpu")
    fp8 = rep.results[1]
    assert fp8.verdict == "not_measured" and "no Linear layer was converted to fp8" in fp8.reason
    assert fp8.equivalence["verdict"] == "not_measured" and fp8.delta_vs_fp32 is None
    path = tmp_path / "p.json"
    path.write_text(json.dumps(rep.to_dict()))
    report = build(load_all([str(path)]))
    assert report.counts


def test_a_factory_that_exits_on_a_later_call_fails_its_runs_and_the_document_is_written(tmp_path, monkeypatch):
    """It passed the check in the child; in ampkit's own process sys.exit(0) ended parity with exit 0 and no
    JSON. Now each run that calls it fails with one line naming it, and the document is written."""
    import json

    monkeypatch.chdir(HERE)
    monkeypatch.setenv("EXIT_LATER_FILE", str(tmp_path / "calls"))
    out = tmp_path / "p.json"
    rc = main(["parity", "--device", "cpu", "--modes", "fp32,bf16", "--seeds", "1", "--steps", "2", "--model",
               "parity_factories:exits_on_a_later_call", "--data", "parity_factories:blobs", "--json", str(out)])
    doc = json.loads(out.read_text())
    errors = [run["error"] for p in doc["results"] for run in p["runs"]]
    assert rc == 1 and errors and all("calling parity_factories:exits_on_a_later_call() failed: it called sys.exit(0)"
                                      in e for e in errors), errors


def test_outputs_stay_where_asked_when_a_factory_changes_the_working_folder(tmp_path, monkeypatch):
    import shutil

    for name in ("parity_factories.py",):
        shutil.copy(os.path.join(HERE, name), tmp_path / name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    rc = main(["parity", "--device", "cpu", "--modes", "fp32", "--seeds", "1", "--steps", "2", "--model",
               "parity_factories:moves_the_working_folder", "--data", "parity_factories:blobs", "--json", "p.json"])
    assert rc in (0, 1) and (tmp_path / "p.json").exists() and not (tmp_path / "elsewhere" / "p.json").exists()


def test_a_hanging_factory_past_its_timeout_leaves_no_process_behind(capsys, monkeypatch):
    """issue #40: the child was stopped, the process it had started (user code) was left running under init."""
    import time

    import psutil

    monkeypatch.chdir(HERE)

    def marked():
        return [p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [])[-1:] == ["377.25"]]

    rc = main(["parity", "--device", "cpu", "--modes", "fp32", "--seeds", "1", "--model",
               "parity_factories:spawns_then_hangs", "--data", "parity_factories:blobs", "--timeout", "4"])
    assert rc == 2 and "no result after 4 s (--timeout)" in capsys.readouterr().err
    time.sleep(0.5)
    left = marked()
    for p in left:
        p.kill()
    assert not left, "the factory's own process was left running"
