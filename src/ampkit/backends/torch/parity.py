"""Parity for PyTorch: each (seed, mode) run trains through ``ampkit.MixedPrecision``."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...errors import UsageError
from ...factory import call_user
from ...parity.ops import ParityData
from ...parity.report import RunRecord
from .engine import MixedPrecision
from .parity_data import EVAL_BATCH, TensorFeed, accuracy, arrays_chance, prepare
from .workloads.base import Workload, call_model, logits_of


def _float(out):
    return out.float() if isinstance(out, torch.Tensor) and out.is_floating_point() else out


@torch.no_grad()
def _evaluate(model, mp, feed, device, loss_fn, metric_fn):
    """(metric, loss) over the validation data, each the mean over its samples (a metric of
    ``None``: the loss)."""
    model.eval()
    metric_sum = loss_sum = 0.0
    n = 0
    for xb, yb in feed.batches(0, 0, device, shuffle=False, batch_size=EVAL_BATCH):
        with mp.autocast():
            out = _float(call_model(model, xb))
        k = len(yb)
        loss = float(loss_fn(out, yb))
        loss_sum += loss * k
        metric_sum += (float(metric_fn(logits_of(out), yb)) if metric_fn is not None else loss) * k
        n += k
    model.train()
    return metric_sum / max(n, 1), loss_sum / max(n, 1)


def _feed(part, batch_size: int):
    return part if hasattr(part, "batches") else TensorFeed(part[0], part[1], batch_size)


def train_one(make_model: Callable[[], nn.Module], mode: str, seed: int, device, train, test, *, epochs: int,
              batch_size: int, lr: float, loss_fn=F.cross_entropy, metric_fn=accuracy, on_epoch=None,
              steps: int | None = None, plan: dict | None = None) -> RunRecord:
    """Train one seed in one mode; the same seed gives the same weights and order in every mode.

    ``train``/``test``: ``(inputs, targets)`` tensors or a feed (:mod:`.parity_data`). ``steps``:
    optimizer steps instead of ``epochs`` (evaluated at each epoch's end and at the last step);
    ``on_epoch(done, total)`` counts epochs, or steps when ``steps`` is given."""
    torch.manual_seed(seed)
    built = make_model()
    model = (built.model if isinstance(built, Workload) else built).to(device)
    mp = MixedPrecision.from_plan(plan, device, model=model) if plan else MixedPrecision(mode, device, model=model)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    train, test = _feed(train, batch_size), _feed(test, batch_size)
    rec = RunRecord(mode, seed, [], [], [], 0, 0.0, steps=steps)
    if mode == "fp8" and not any(d["converted"] for d in mp.fp8_layers):  # nothing runs in fp8: bf16 by another name
        rec.not_measured = (f"no Linear layer was converted to fp8 ({len(mp.fp8_layers)} Linear layer(s), none of a "
                            "convertible size or position): the runs were bf16, so they say nothing about fp8")
    t0 = time.perf_counter()
    done, epoch, first = 0, 0, None
    while (done < steps) if steps else (epoch < epochs):
        total = torch.zeros((), device=device)
        batches = 0
        for xb, yb in train.batches(seed, epoch, device):
            with mp.autocast():
                loss = loss_fn(_float(call_model(model, xb)), yb)
            mp.backward(loss)
            mp.step(opt, zero_grad=True)
            total += loss.detach().float()  # summed on the device: no per-step sync
            if first is None:
                first = loss.detach().float()  # read with the epoch's sum (did the loss fall? parity.chance)
            batches += 1
            done += 1
            if steps and on_epoch:
                on_epoch(done, steps)
            if steps and done >= steps:
                break
        epoch += 1
        rec.train_loss.append(float(total) / max(batches, 1))  # one sync per epoch
        if rec.first_loss is None and first is not None:
            rec.first_loss = float(first)
        acc, test_loss = _evaluate(model, mp, test, device, loss_fn, metric_fn)
        rec.test_accuracy.append(acc)
        rec.test_loss.append(test_loss)
        if on_epoch and not steps:
            on_epoch(epoch, epochs)
    rec.skipped_steps = mp.stats["skipped"]
    rec.seconds = time.perf_counter() - t0
    return rec


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
    """:class:`ampkit.parity.ops.ParityOps` for PyTorch (the flow: :mod:`ampkit.parity.driver`)."""

    def prepare_parity(self, data: ParityData, target) -> ParityData:
        if isinstance(data.model, nn.Module):  # a model is callable too, but each seed needs a fresh one
            raise UsageError("make_model must be a factory returning a fresh model (each seed and mode trains its "
                             f"own), not a model: pass lambda: {type(data.model).__name__}(...)")
        if data.plan:  # --plan: an entry matching no module is one line before any run
            from .engine.islands import check_plan

            built = data.model() if callable(data.model) else dataset_model(data.model)
            check_plan(data.plan, built.model if isinstance(built, Workload) else built)
        if data.sets is None:  # arrays: checked when made, trained with cross-entropy and accuracy by default
            return dataclasses.replace(data, chance=arrays_chance(data))
        return prepare(data, torch.device(target.device))

    def parity_group(self, device: str):
        """Under torchrun: this rank's place in the group (:mod:`.parity_group`); None for one process."""
        from .parity_group import join

        return join(device, self.target)

    def train_seed(self, data: ParityData, mode: str, seed: int, target, *, epochs: int,
                   on_epoch=None) -> RunRecord:
        if callable(data.model):  # the user's factory: what it raises, or sys.exit, is this run's failure in words
            def make_model(_f=data.model, _spec=data.model_spec or getattr(data.model, "__name__", "the model factory")):
                return call_user(_f, _spec)
        else:
            def make_model():
                return dataset_model(data.model)
        if data.sets is not None:  # feeds made by prepare_parity, the metric settled there (None: the loss)
            train, test, metric_fn = data.sets.train, data.sets.test, data.metric_fn
        else:
            a = data.arrays
            train, test = TensorFeed(a.x_train, a.y_train, data.batch_size), TensorFeed(a.x_test, a.y_test, data.batch_size)
            metric_fn = data.metric_fn or accuracy
        return train_one(make_model, mode, seed, torch.device(target.device), train, test, epochs=epochs,
                         batch_size=data.batch_size, lr=data.lr, loss_fn=data.loss_fn or F.cross_entropy,
                         metric_fn=metric_fn, on_epoch=on_epoch, steps=data.steps,
                         plan=data.plan if mode.startswith("plan:") else None)
