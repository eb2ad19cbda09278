"""Parity for PyTorch: each (seed, mode) run trains through ``ampkit.MixedPrecision``.

The data order, the statistics and the verdicts are :mod:`ampkit.parity.core`'s, shared with Keras.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...errors import UsageError
from ...parity.core import ParityConfig, ParityReport, RunRecord, loader_order, resolve_modes, run_seeds, summarize
from .devices import mode_support, resolve_auto, resolve_device
from .engine import MixedPrecision
from .environment import torch_environment


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


# ---------------------------------------------------------------- entry points
def parity(make_model: Callable[[], nn.Module], train: tuple, test: tuple, *, modes=None, seeds: int | list[int] = 3,
           epochs: int = 10, batch_size: int = 64, lr: float = 1e-3, tolerance: float = 0.01, device="auto",
           loss_fn=F.cross_entropy, metric_fn=accuracy, dataset: str = "custom", progress=None) -> ParityReport:
    """Parity on your own model and data.

    Args:
        make_model: zero-argument callable returning a fresh float32 model (called after seeding,
            so each seed gives the same initial weights in every mode).
        train, test: ``(inputs, targets)`` tensors.
        modes: list or comma string; fp32 is the baseline and is added when missing; ``auto``
            stands for the mode auto picks on this device (the report's ``note`` says which).
        seeds: how many seeds (0, 1, 2, ...) or an explicit list.
        metric_fn: ``metric_fn(logits, targets) -> scalar``, higher is better (default accuracy).
        tolerance: how much worse than fp32 (absolute metric) still counts as parity.
    """
    device = resolve_device(device)
    modes, note = resolve_modes(modes, lambda m: mode_support(m, device), f"on {device}",
                                auto=lambda: resolve_auto(device))
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if not seed_list:
        raise UsageError("parity needs at least one seed")
    if epochs < 1:
        raise UsageError(f"epochs must be >= 1; received {epochs}")
    t0 = time.perf_counter()
    records = run_seeds(modes, seed_list, lambda mode, seed, cb: train_one(
        make_model, mode, seed, device, train, test, epochs=epochs, batch_size=batch_size, lr=lr, loss_fn=loss_fn,
        metric_fn=metric_fn, on_epoch=cb), progress)
    results = summarize(records, modes, tolerance)
    return ParityReport(dataset, str(device), results, torch_environment(device), tolerance, epochs,
                        elapsed_s=round(time.perf_counter() - t0, 3), interrupted=records.interrupted, note=note)


def run_parity(cfg: ParityConfig, progress=None) -> ParityReport:
    """The CLI's entry: a built-in dataset with its model."""
    from ...parity.datasets import load

    cfg.validate()
    device = resolve_device(cfg.device)
    ds = load(cfg.dataset)
    train = (torch.from_numpy(ds.x_train), torch.from_numpy(ds.y_train).long())
    test = (torch.from_numpy(ds.x_test), torch.from_numpy(ds.y_test).long())
    return parity(lambda: dataset_model(ds.arch), train, test, modes=cfg.modes,
                  seeds=cfg.seeds, epochs=cfg.epochs or ds.epochs, batch_size=ds.batch_size, lr=ds.lr,
                  tolerance=cfg.tolerance, device=device, dataset=ds.name, progress=progress)


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


class TorchParity:
    """torch/parity's operations for the neutral driver (being written: issue #21)."""
