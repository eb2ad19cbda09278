"""The default data set, digits, as ampkit loads it: scikit-learn's own data and scikit-learn's own
stratified split (the indices ampkit ships in ``ampkit/parity/splits/digits.json``), read without
importing scikit-learn (1.3 s of CPU in every parity process on the default data set)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.resources import files

import numpy as np
import pytest

pytest.importorskip("sklearn")


def test_digits_are_scikit_learns_data_and_scikit_learns_stratified_split():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from ampkit.parity.datasets import load

    d = load_digits()
    want = train_test_split((d.data / 16.0).astype(np.float32), d.target.astype(np.int64), test_size=0.25,
                            random_state=0, stratify=d.target)
    got = load("digits").source
    for mine, theirs in zip((got.x_train, got.x_test, got.y_train, got.y_test), want):
        assert mine.dtype == theirs.dtype and np.array_equal(mine, theirs)
    split = json.loads(files("ampkit.parity").joinpath("splits", "digits.json").read_text())
    assert split["samples"] == len(d.target) == 1797
    assert sorted(split["train"] + split["test"]) == list(range(1797)) and len(split["test"]) == 450


def test_loading_digits_imports_no_scikit_learn():
    code = ("import sys; from ampkit.parity.datasets import load; s = load('digits').source; "
            "print(len(s.y_train), len(s.y_test), 'sklearn' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["1347", "450", "False"], r.stdout
