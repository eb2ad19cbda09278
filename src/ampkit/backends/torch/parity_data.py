"""A caller's data for PyTorch parity: tensors, ``Dataset``s or ``DataLoader``s as one kind of feed,
and the checks that run before any training (:func:`prepare`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset, IterableDataset

from ...errors import UsageError, one_line
from ...factory import call_user
from ...parity.ops import ParityData, loader_order, of_targets
from .workloads.base import Workload, call_model, logits_of

EVAL_BATCH = 1024


def to_device(obj, device: torch.device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=True)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (tuple, list)):
        return type(obj)(to_device(v, device) for v in obj)
    return obj


def _tensor(a):
    if isinstance(a, np.ndarray):
        return torch.from_numpy(a).long() if a.dtype.kind in "iu" else torch.from_numpy(a)
    return a


class TensorFeed:
    """``(inputs, targets)`` tensors (or NumPy arrays): batches by indexing, on the device once."""

    def __init__(self, x, y, batch_size: int):
        self.x, self.y, self.batch_size = _tensor(x), _tensor(y), batch_size
        self._on = None

    def __len__(self) -> int:
        return len(self.x)

    def size(self) -> int:
        return len(self.x)

    def _moved(self, device):
        if self._on is None or self._on[0] != device:
            self._on = (device, self.x.to(device), self.y.to(device))
        return self._on[1], self._on[2]

    def batches(self, seed: int, epoch: int, device, *, shuffle: bool = True, batch_size: int | None = None) -> Iterator:
        x, y = self._moved(device)
        bs = batch_size or self.batch_size
        if not shuffle:
            for i in range(0, len(x), bs):
                yield x[i:i + bs], y[i:i + bs]
            return
        order = torch.from_numpy(loader_order(len(x), seed, epoch)).to(device)
        for i in range(0, len(order), bs):
            idx = order[i:i + bs]
            yield x[idx], y[idx]


class DatasetFeed:
    """A map-style ``Dataset`` (or a ``DataLoader`` over one: its batch size, collate function and
    workers), batched in the paired order; an ``IterableDataset`` in its own order, seeded."""

    def __init__(self, obj, batch_size: int):
        loader = obj if isinstance(obj, DataLoader) else None  # never `if loader`: a DataLoader's truth is its length
        self.dataset = loader.dataset if loader is not None else obj
        self.batch_size = (loader.batch_size if loader is not None and loader.batch_size else batch_size)
        self.collate = loader.collate_fn if loader is not None else None
        self.workers = loader.num_workers if loader is not None else 0
        self.drop_last = bool(loader is not None and loader.drop_last)  # e.g. BatchNorm refusing a batch of 1
        self.loader = loader
        self.iterable = isinstance(self.dataset, IterableDataset)

    def size(self) -> int | None:
        """Samples in the data set; None for an ``IterableDataset`` without ``__len__`` (known by reading it)."""
        try:
            return len(self.dataset)
        except TypeError:  # an IterableDataset without __len__ (len() of a -1 raised "should return >= 0")
            return None

    def batches(self, seed: int, epoch: int, device, *, shuffle: bool = True, batch_size: int | None = None) -> Iterator:
        bs = batch_size or self.batch_size
        if self.iterable:
            torch.manual_seed(seed * 1000 + epoch)
            source = self.loader if self.loader is not None else DataLoader(self.dataset, batch_size=bs)
        else:
            order = loader_order(len(self.dataset), seed, epoch).tolist() if shuffle else range(len(self.dataset))
            kw = {"collate_fn": self.collate} if self.collate is not None else {}
            source = DataLoader(self.dataset, batch_size=bs, sampler=order, num_workers=self.workers,
                                drop_last=self.drop_last, **kw)
        for batch in source:
            yield to_device(_pair(batch), device)


def _pair(batch):
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
        what = f"a {type(batch).__name__}" + (f" of {len(batch)}" if isinstance(batch, (tuple, list)) else "")
        raise UsageError(f"each item of the data must be (input, target); a batch came as {what}")
    return batch[0], batch[1]


def make_feed(obj, part: str, spec: str, batch_size: int):
    """A feed from what a data factory returned for ``part`` (train or validation); a usage error
    naming the factory for anything else or an empty data set."""
    if isinstance(obj, (DataLoader, Dataset)):
        feed = DatasetFeed(obj, batch_size)
    elif isinstance(obj, (tuple, list)) and len(obj) == 2 and all(isinstance(a, (torch.Tensor, np.ndarray)) for a in obj):
        x, y = obj
        if len(x) != len(y):
            raise UsageError(f"{spec}: the {part} inputs and targets have different lengths ({len(x)} and {len(y)})")
        feed = TensorFeed(x, y, batch_size)
    else:
        raise UsageError(f"{spec}: the {part} data is a {type(obj).__name__}; expected a torch Dataset, a DataLoader or "
                         "an (inputs, targets) pair of tensors")
    if feed.size() == 0:
        raise UsageError(f"{spec}: the {part} data set is empty")
    return feed


#: reading an iterable data set of unknown length to its end stops here: beyond it, it counts as endless
ENDLESS_BATCHES, ENDLESS_SECONDS = 100_000, 120.0


def check_ends(feed, part: str, spec: str, device) -> None:
    """An iterable data set of unknown length trains by epochs only if it ends: read it once (a
    finite one to its end); one that does not end within the bounds needs ``--steps``."""
    import time

    if feed.size() is not None:
        return
    t0 = time.monotonic()
    for n, _ in enumerate(feed.batches(0, 0, torch.device("cpu"), shuffle=False), 1):
        if n >= ENDLESS_BATCHES or time.monotonic() - t0 > ENDLESS_SECONDS:
            fix = ("an endless stream has no epochs; give --steps N" if part == "train" else
                   "validation reads its data to the end; give a finite validation set")
            raise UsageError(f"{spec}: the {part} data is an iterable of unknown length that did not end after {n:,} "
                             f"batches ({time.monotonic() - t0:.0f} s): {fix}")


def _first(feed, part: str, spec: str, device):
    try:
        return next(iter(feed.batches(0, 0, device, shuffle=False)))
    except StopIteration:
        n, loader = feed.size(), getattr(feed, "loader", None)
        if n and loader is not None and loader.drop_last:
            raise UsageError(f"{spec}: the {part} DataLoader yields no batch: {n} samples, batch size "
                             f"{feed.batch_size} and drop_last=True") from None
        raise UsageError(f"{spec}: the {part} data set is empty") from None
    except UsageError as exc:
        raise UsageError(f"{spec}: {exc}") from None
    except Exception as exc:
        raise UsageError(f"{spec}: reading a {part} batch failed: {one_line(exc)}") from None


def is_class_target(output, targets) -> bool:
    """Class indices: integer targets, one fewer dimension than the logits."""
    try:
        logits = logits_of(output)
    except TypeError:
        return False
    return (isinstance(targets, torch.Tensor) and not targets.is_floating_point() and not targets.is_complex()
            and logits.dim() == targets.dim() + 1)


def accuracy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return (logits.argmax(-1) == targets).float().mean()


def make_model(data: ParityData, spec: str):
    """Call the model factory: (module, workload or None); a usage error for anything else."""
    obj = call_user(data.model, spec)
    if isinstance(obj, Workload):
        return obj.model, obj
    if isinstance(obj, nn.Module):
        return obj, None
    raise UsageError(f"{spec}() returned a {type(obj).__name__}; expected a torch.nn.Module or an ampkit.Workload")


def prepare(data: ParityData, device: torch.device) -> ParityData:
    """A caller's model and data checked before any training: both parts make batches of
    ``(input, target)``, the model takes a batch of each (fp32, no gradient), the loss is a finite
    scalar. Returns the data with feeds, the loss and the metric (``accuracy`` for class targets,
    else the validation loss, lower being better) settled."""
    mspec, dspec = data.model_spec or "the model factory", data.data_spec or "the data factory"
    train = make_feed(data.sets.train, "train", dspec, data.batch_size)
    test = make_feed(data.sets.test, "validation", dspec, data.batch_size)
    if not data.steps:  # epochs: the training data must end (validation is always read to its end)
        check_ends(train, "train", dspec, device)
    check_ends(test, "validation", dspec, device)
    torch.manual_seed(0)
    model, workload = make_model(data, mspec)
    loss_fn = data.loss_fn or (workload.loss_fn if workload is not None else None)
    metric_fn = data.metric_fn or (getattr(workload, "metric_fn", None) if workload is not None else None)
    model.to(device).eval()
    found_class = None
    for part, feed in (("train", train), ("validation", test)):
        xb, yb = _first(feed, part, dspec, device)
        try:
            with torch.no_grad():
                out = call_model(model, xb)
                classes = is_class_target(out, yb)
                if loss_fn is None and not classes:
                    _same_shape(out, yb, part, mspec, dspec)
                loss = (loss_fn or _default_loss(classes))(out, yb)
        except UsageError:
            raise
        except Exception as exc:
            raise UsageError(f"a {part} batch of {dspec} does not fit {mspec} (checked before any training): "
                             f"{one_line(exc)}") from None
        if not (isinstance(loss, torch.Tensor) and loss.numel() == 1):
            raise UsageError(f"the loss of {mspec} on {dspec} is a {type(loss).__name__} of shape "
                             f"{tuple(getattr(loss, 'shape', ()))}; expected a scalar tensor")
        found_class = classes if found_class is None else found_class and classes
    metric = (getattr(metric_fn, "__name__", "metric") if metric_fn is not None
              else "accuracy" if found_class else "loss")
    chance = None
    if (metric == "accuracy" and metric_fn is None) or (metric == "loss" and loss_fn is None):  # a known constant
        targets = torch.cat([yb.reshape(len(yb), -1).cpu() for _, yb in test.batches(0, 0, torch.device("cpu"),
                                                                                       shuffle=False)])
        chance = of_targets(targets.numpy(), metric, bool(found_class))
    return dataclasses.replace(data, source=dataclasses.replace(data.sets, train=train, test=test),
                               loss_fn=loss_fn or _default_loss(found_class),
                               metric_fn=metric_fn or (accuracy if found_class else None), metric=metric,
                               higher_is_better=metric != "loss", chance=chance)


def arrays_chance(data: ParityData):
    """The constant predictor of in-memory class targets under the default accuracy (None otherwise)."""
    y = _tensor(data.arrays.y_test)
    if data.metric_fn is not None or not isinstance(y, torch.Tensor) or y.is_floating_point() or y.is_complex():
        return None
    return of_targets(y.detach().cpu().numpy(), "accuracy", True)


def _same_shape(out, yb, part: str, mspec: str, dspec: str) -> None:
    """The default mean squared error needs the output's shape: (64, 1) against (64,) would broadcast
    to (64, 64) and train on a wrong loss without an error."""
    shape = tuple(logits_of(out).shape)
    if not isinstance(yb, torch.Tensor) or tuple(yb.shape) != shape:
        got = tuple(yb.shape) if isinstance(yb, torch.Tensor) else type(yb).__name__
        raise UsageError(f"the {part} targets of {dspec} are {got} and {mspec}'s output {shape}: the default loss "
                         "(mean squared error, for targets that are not integer class indices) needs the same shape; "
                         "reshape the targets or return an ampkit.Workload with its own loss_fn")


def _default_loss(classes: bool):
    from .workloads.base import cross_entropy

    if classes:
        return cross_entropy
    return lambda out, y: torch.nn.functional.mse_loss(logits_of(out).float(), y.float())
