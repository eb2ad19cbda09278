"""Issue #49 point 5: parity's and bench's factory errors come before any torch import where the check
allows: a module that cannot be found (in the parent, no child at all), a model factory returning a
string and a data factory returning an empty data set (in the factory check's child, before the
parent loads the framework). One child process runs every case with ampkit's main(); after each it
reports the exit code, the one error line and whether torch was imported in that process."""

from __future__ import annotations

import json
import subprocess
import sys

PLAIN = '''
import numpy as np


def as_string():
    return "resnet18"


def data():
    x = np.zeros((16, 8), "float32")
    return (x, np.zeros(16, "int64")), (x, np.zeros(16, "int64"))


def empty():
    x = np.zeros((16, 8), "float32")
    return (x[:0], np.zeros(0, "int64")), (x, np.zeros(16, "int64"))


def model():
    return object()
'''

CHILD = r"""
import contextlib, io, json, sys
from ampkit.cli.main import main
out = []
for args in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(args)
    out.append({"rc": rc, "lines": [ln for ln in err.getvalue().splitlines() if ln.strip()], "torch": "torch" in sys.modules})
print("RESULTS=" + json.dumps(out))
"""

CASES = [
    (["parity", "--model", "nosuchmodule:f", "--data", "plain49:data", "--device", "cpu"],
     "ampkit: error: cannot import module 'nosuchmodule' for --model nosuchmodule:f: ModuleNotFoundError: "
     "No module named 'nosuchmodule'"),
    (["parity", "--model", "plain49:as_string", "--data", "plain49:data", "--device", "cpu"],
     "plain49:as_string() returned a str; expected a torch.nn.Module or an ampkit.Workload"),
    (["parity", "--model", "plain49:model", "--data", "plain49:empty", "--device", "cpu"],
     "plain49:empty: the train data set is empty"),
    (["parity", "--model", "plain49:model", "--data", "nosuch.data:f", "--device", "cpu"],
     "cannot import module 'nosuch.data' for --data nosuch.data:f: ModuleNotFoundError: No module named 'nosuch'"),
    (["bench", "--model", "nosuchmodule:f", "--input-shape", "8", "--device", "cpu"],
     "cannot import module 'nosuchmodule' for --model nosuchmodule:f"),
]


def test_factory_errors_before_any_torch_import(tmp_path):
    (tmp_path / "plain49.py").write_text(PLAIN)
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps([args for args, _ in CASES])], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert "RESULTS=" in r.stdout, r.stderr[-3000:]
    results = json.loads(r.stdout.split("RESULTS=", 1)[1])
    for (args, needle), res in zip(CASES, results):
        assert res["rc"] == 2 and len(res["lines"]) == 1 and needle in res["lines"][0], (args, res)
        assert res["lines"][0].startswith("ampkit: error: ") and not res["torch"], (args, res)
