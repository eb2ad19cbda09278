"""What parity's driver (:mod:`ampkit.parity.driver`) asks of a framework backend: small typed operations.

Part of :class:`ampkit.backends.base.Backend`; the flow around them -- the modes (``auto``
included), the seed x mode loop, the statistics, the verdicts and the report -- is the driver's,
written once. A backend trains one seed in one mode on :class:`ParityData` and says what happened.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..target import Target
from .report import RunRecord


@dataclass(frozen=True)
class ParityData:
    """What every run of a parity trains on.

    ``x_*``/``y_*``: inputs and class indices; NumPy arrays for the built-in datasets
    (:func:`ampkit.parity.datasets.load`: float32 inputs, images NCHW, int64 targets), or a
    framework's own tensors from its library entry. ``model``: a built-in architecture name
    (``"mlp"``: 64 features; ``"cnn"``: 1x28x28 images; 10 classes) or a zero-argument factory
    returning a fresh float32 model (called after seeding). ``epochs``: the default when the config
    names none. ``loss_fn``/``metric_fn``: the framework's ``(logits, targets) -> scalar``; None for
    cross-entropy and accuracy (higher is better).

    A caller's own data (``--data MODULE:FACTORY``) comes as ``train``/``test`` instead: whatever
    the data factory returned for each (torch ``Dataset``s or ``DataLoader``s, ``tf.data.Dataset``s,
    ``(inputs, targets)`` arrays), with ``data_factory`` to call it again (a tf.data pipeline is
    rebuilt for every run, so its shuffling repeats in every mode) and ``model_spec``/``data_spec``
    naming them in messages. :meth:`ParityOps.prepare_parity` checks them and settles ``metric``
    (its name) and ``higher_is_better``. ``steps``: optimizer steps per run instead of epochs."""

    name: str
    x_train: object
    y_train: object
    x_test: object
    y_test: object
    model: str | Callable[[], object]
    epochs: int
    batch_size: int = 64
    lr: float = 1e-3
    loss_fn: Callable | None = None
    metric_fn: Callable | None = None
    train: object = None
    test: object = None
    data_factory: Callable | None = None
    model_spec: str | None = None
    data_spec: str | None = None
    metric: str = "accuracy"
    higher_is_better: bool = True
    steps: int | None = None
    plan: dict | None = None     # the precision plan mode "plan:<default>" trains with (--plan)

    def __post_init__(self) -> None:
        """The library's own arguments (a built-in dataset passes these by construction)."""
        import math

        from ..errors import UsageError

        if not (isinstance(self.model, str) or callable(self.model)):
            raise UsageError(f"make_model must be a zero-argument callable returning a fresh model; "
                             f"received {type(self.model).__name__}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise UsageError(f"batch_size must be a positive integer; received {self.batch_size!r}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise UsageError(f"lr must be a positive number; received {self.lr!r}")
        if self.train is not None:  # a data factory's datasets: the backend checks them (prepare_parity)
            return
        for part, x, y in (("train", self.x_train, self.y_train), ("test", self.x_test, self.y_test)):
            try:
                nx, ny = len(x), len(y)
            except TypeError:
                raise UsageError(f"{part} must be (inputs, targets) arrays or tensors; received {type(x).__name__}")
            if nx != ny or nx == 0:
                raise UsageError(f"{part} needs as many targets as inputs, at least one; received {nx} inputs, {ny} targets")


@runtime_checkable
class ParityOps(Protocol):
    def prepare_parity(self, data: ParityData, target: Target) -> ParityData:
        """Check a caller's model and data before any training and return them ready for
        :meth:`train_seed`: the data factory's parts are data sets this framework reads, not empty,
        of ``(input, target)`` items; the model factory returns a model (or an ``ampkit.Workload``)
        that takes a batch of each part and gives a scalar loss. Settles ``metric`` (``accuracy``
        for class targets, else ``loss``) and ``higher_is_better``. Anything wrong is one
        :class:`~ampkit.errors.UsageError` line. Built-in data (``train`` None) passes unchanged."""

    def train_seed(self, data: ParityData, mode: str, seed: int, target: Target, *, epochs: int,
                   on_epoch: Callable[[int, int], None] | None = None) -> RunRecord:
        """Train a fresh ``data.model`` on ``target`` in ``mode`` for ``epochs`` epochs and evaluate it
        after each one: ``RunRecord(mode, seed, train_loss, test_accuracy, test_loss, skipped_steps,
        seconds)`` with one entry per epoch. The same ``seed`` gives the same initial weights in every
        mode, and epoch ``e`` visits the training samples in ``loader_order(n, seed, e)``
        (:func:`ampkit.parity.core.loader_order`), so the runs of a seed are paired.
        ``on_epoch(done, total)`` after each epoch."""

    # ---------------------------------------------------------------- optional, declared with its default
    def parity_group(self, device: str):
        """Under a launcher (``WORLD_SIZE`` > 1): this process's place in the group the (mode, seed)
        runs are spread over. Default: unsupported, because spreading parity over processes needs a
        launcher of the framework's own (torchrun); run shares of the grid with ``--shard`` instead."""
        import os

        from ..errors import UsageError

        raise UsageError(f"WORLD_SIZE={os.environ.get('WORLD_SIZE')}: spreading parity over processes is PyTorch's "
                         f"(torchrun); for {self.name}, run shares of the grid with "
                         "--shard I/N and --merge them")
