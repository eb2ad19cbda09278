"""Parity for PyTorch: each (seed, mode) run trains through ``ampkit.MixedPrecision``.

The data order, the statistics and the verdicts are :mod:`ampkit.parity.core`'s and the flow is
:mod:`ampkit.parity.driver`'s, shared with Keras.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...errors import UsageError
from ...parity.core import loader_order
from ...parity.ops import ParityData
from ...parity.report import RunRecord
from .engine import MixedPrecision


@torch.no_grad()
def _evaluate(model, mp, x, y, batch_size, metric_fn):
    model.eval()
    outs = []
    for i in range(0, len(x), 1024):
        with mp.autocast():
            outs.append(model(x[i:i + 1024]).float())
    logits = torch.cat(outs)
    model.train()
    return float(metric_fn(logits, y)), float(F.cross_entropy(logits, y))


def accuracy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return (logits.argmax(-1) == targets).float().mean()


def train_one(make_model: Callable[[], nn.Module], mode: str, seed: int, device, train, test, *, epochs: int,
              batch_size: int, lr: float, loss_fn=F.cross_entropy, metric_fn=accuracy, on_epoch=None) -> RunRecord:
    """Train one seed in one mode; the same seed gives the same weights and order in every mode."""
    torch.manual_seed(seed)
    model = make_model().to(device)
    mp = MixedPrecision(mode, device, model=model)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    xtr, ytr = train[0].to(device), train[1].to(device)
    xte, yte = test[0].to(device), test[1].to(device)
    rec = RunRecord(mode, seed, [], [], [], 0, 0.0)
    t0 = time.perf_counter()
    for epoch in range(epochs):
        order = torch.from_numpy(loader_order(len(xtr), seed, epoch)).to(device)
        total = torch.zeros((), device=device)
        batches = 0
        for i in range(0, len(order), batch_size):
            idx = order[i:i + batch_size]
            with mp.autocast():
                loss = loss_fn(model(xtr[idx]).float(), ytr[idx])
            mp.backward(loss)
            mp.step(opt, zero_grad=True)
            total += loss.detach()  # summed on the device: no per-step sync
            batches += 1
        rec.train_loss.append(float(total) / batches)  # one sync per epoch
        acc, test_loss = _evaluate(model, mp, xte, yte, batch_size, metric_fn)
        rec.test_accuracy.append(acc)
        rec.test_loss.append(test_loss)
        if on_epoch:
            on_epoch(epoch + 1, epochs)
    rec.skipped_steps = mp.stats["skipped"]
    rec.seconds = time.perf_counter() - t0
    return rec


def parity(make_model: Callable[[], nn.Module], train: tuple, test: tuple, *, modes=None, seeds: int | list[int] = 3,
           epochs: int = 10, batch_size: int = 64, lr: float = 1e-3, tolerance: float = 0.01, device="auto",
           loss_fn=F.cross_entropy, metric_fn=accuracy, dataset: str = "custom", progress=None):
    """Parity on your own model and data: ``ampkit.parity`` (the same parameters, with PyTorch's
    defaults spelled out), run by the neutral driver through :class:`TorchParity`."""
    from ...parity import parity as neutral_parity

    return neutral_parity(make_model, train, test, modes=modes, seeds=seeds, epochs=epochs, batch_size=batch_size,
                          lr=lr, tolerance=tolerance, device=device, loss_fn=loss_fn, metric_fn=metric_fn,
                          dataset=dataset, progress=progress)


def dataset_model(arch: str) -> nn.Module:
    """The model of a built-in dataset (the Keras backend builds the same shapes)."""
    if arch == "mlp":  # digits: 64 features
        return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
    if arch == "cnn":  # mnist5k: 1x28x28 images
        return nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(16 * 7 * 7, 10),
        )
    raise ValueError(f"no PyTorch model for dataset architecture {arch!r}")


def _tensors(x, y) -> tuple[torch.Tensor, torch.Tensor]:
    """A built-in dataset's NumPy arrays as tensors (shared memory, no copy); a caller's tensors as they are."""
    x = torch.from_numpy(x) if isinstance(x, np.ndarray) else x
    y = torch.from_numpy(y).long() if isinstance(y, np.ndarray) else y
    return x, y


class TorchParity:
    """:class:`ampkit.parity.ops.ParityOps` for PyTorch (the flow: :mod:`ampkit.parity.driver`)."""

    def train_seed(self, data: ParityData, mode: str, seed: int, target, *, epochs: int,
                   on_epoch=None) -> RunRecord:
        if isinstance(data.model, nn.Module):  # a model is callable too, but each seed needs a fresh one
            raise UsageError("make_model must be a factory returning a fresh model (each seed and mode trains its "
                             f"own), not a model: pass lambda: {type(data.model).__name__}(...)")
        make_model = data.model if callable(data.model) else (lambda: dataset_model(data.model))
        return train_one(make_model, mode, seed, torch.device(target.device), _tensors(data.x_train, data.y_train),
                         _tensors(data.x_test, data.y_test), epochs=epochs, batch_size=data.batch_size, lr=data.lr,
                         loss_fn=data.loss_fn or F.cross_entropy, metric_fn=data.metric_fn or accuracy,
                         on_epoch=on_epoch)
