"""Issue #40, after the first round: ``ampkit.parity(model="MODULE:FACTORY", data=...)`` from the
library gets the CLI's protection -- the factories named by strings are imported and called in a
child first, so one that exits, aborts or hangs is a UsageError naming it, never the end of the
caller's process (before: ``sys.exit(0)`` in the factory ended the caller's Python silently)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import ampkit
from ampkit.errors import UsageError
from helpers import TINY_DATA_SOURCE

FACTORIES = '''
import os
import sys
import time

import torch
import torch.nn as nn


def model():
    return nn.Linear(8, 4)


def exits():
    sys.exit(0)


def aborts():
    os.abort()


def hangs():
    time.sleep(3600)
''' + TINY_DATA_SOURCE


@pytest.fixture
def factories(tmp_path, monkeypatch):
    (tmp_path / "fx.py").write_text(FACTORIES)
    (tmp_path / "exits_on_import.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("model, data, timeout, words", [
    ("fx:exits", "fx:data", 60, "calling fx:exits() failed: it called sys.exit(0)"),
    pytest.param("fx:model", "fx:aborts", 60, "data fx:aborts() then model fx:model() (in a child process): the "
                 "process was killed by SIGABRT", marks=pytest.mark.slow),
    pytest.param("fx:hangs", "fx:data", 3, "model fx:hangs() (in a child process): no result after 3 s",
                 marks=pytest.mark.slow),
    pytest.param("exits_on_import:f", "fx:data", 60, "cannot import module 'exits_on_import' for model "
                 "exits_on_import:f: it called sys.exit(3)", marks=pytest.mark.slow),
], ids=["sys-exit", "abort", "hang", "sys-exit-at-import"])
def test_a_failing_factory_string_is_a_usage_error_in_the_caller(factories, model, data, timeout, words):
    with pytest.raises(UsageError) as err:
        ampkit.parity(model=model, data=data, modes="fp32", seeds=1, steps=2, progress=False, timeout=timeout)
    assert words in str(err.value)


def test_an_import_that_exits_is_a_usage_error_in_process_too(factories):
    from ampkit.factory import load_factory

    with pytest.raises(UsageError, match=r"it called sys.exit\(3\)"):
        load_factory("exits_on_import:f", flag="model")


@pytest.mark.slow
def test_a_script_without_a_main_guard_is_not_rerun_and_survives(factories):
    """A script that calls the library at its top level: the child does not run the script again,
    and the factory's sys.exit is the caller's exception, after which the script goes on."""
    (factories / "script.py").write_text(
        "import ampkit\n"
        "print('top level')\n"
        "try:\n"
        "    ampkit.parity(model='fx:exits', data='fx:data', modes='fp32', seeds=1, steps=2, progress=False)\n"
        "except ampkit.UsageError as exc:\n"
        "    print('caught:', exc)\n"
        "print('alive')\n")
    r = subprocess.run([sys.executable, "script.py"], cwd=factories, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.splitlines() == ["top level", "caught: calling fx:exits() failed: it called sys.exit(0)", "alive"]
