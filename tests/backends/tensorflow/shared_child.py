"""The selected tests of one Keras flavor share one fresh interpreter: one TensorFlow import instead of
one per test (several seconds apiece on a 2-core CPU). Each test names its calls, functions of a cases
module with their arguments; a child runs them test after test until one fails, each test's verdict its
own (written after each test, so a crash names the test it happened in). Used by test_tf_origin.py and
test_tf_audit_real.py."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))

_CHILD = textwrap.dedent('''
    import contextlib, importlib, io, json, sys, traceback
    cases = importlib.import_module(sys.argv[1])
    out, done = sys.argv[2], {}
    for key, calls in json.loads(sys.argv[3]).items():
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                for name, *args in calls:
                    getattr(cases, name)(*args)
            done[key] = [None, printed.getvalue()]
        except BaseException:
            done[key] = [traceback.format_exc(), printed.getvalue()]
        with open(out, "w") as fh:
            json.dump(done, fh)
''')


def item_key(item) -> str:
    callspec = getattr(item, "callspec", None)
    return f"{item.originalname}[{callspec.id}]" if callspec else item.originalname


def run_selected(request, tmp_path_factory, module: str, tests: dict) -> dict:
    """For each selected item (all, or those -k chose) of ``tests`` (test name -> its parameters ->
    (flavor, [[function, *args], ...])) whose flavor is installed, its calls of ``module``, one child per
    flavor, the tests in the order of ``tests``: {flavor: ({item key: [traceback or None, stdout]}, r)}."""
    chosen = {}
    for test, calls in tests.items():
        for item in request.session.items:
            if getattr(item, "module", None) is request.module and item.originalname == test:
                flavor, todo = calls(item.callspec.params if hasattr(item, "callspec") else {})
                if importlib.util.find_spec(flavor) is not None:  # else its test skips or says so
                    chosen.setdefault(flavor, {})[item_key(item)] = todo
    results = {}
    for flavor, calls in chosen.items():
        out = tmp_path_factory.mktemp(f"{module}_{flavor}") / "done.json"
        r = subprocess.run([sys.executable, "-c", _CHILD, module, str(out), json.dumps(calls)], cwd=HERE,
                           capture_output=True, text=True, timeout=900)
        results[flavor] = (json.loads(out.read_text()) if out.exists() else {}, r)
    return results


def verdict(results: dict, flavor: str, request) -> str:
    """The stdout of this test's calls in its flavor's child; their traceback fails the test."""
    assert flavor in results, f"{flavor} is not installed"
    done, r = results[flavor]
    key = item_key(request.node)
    assert key in done, f"{key} never finished (exit {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    error, printed = done[key]
    assert error is None, f"{key} failed:\n{error}\n{printed[-2000:]}\n{r.stderr[-2000:]}"
    return printed
