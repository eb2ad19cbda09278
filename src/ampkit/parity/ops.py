"""What parity's driver (:mod:`ampkit.parity.driver`) asks of a framework backend: small typed operations.

Part of :class:`ampkit.backends.base.Backend`; the flow around them -- the modes (``auto``
included), the seed x mode loop, the statistics, the verdicts and the report -- is the driver's,
written once. A backend trains one seed in one mode on :class:`ParityData` and says what happened.

What a run trains on comes in one of two shapes (``ParityData.source``): :class:`Arrays`, inputs
and targets in memory (the built-in datasets, ``ampkit.parity(make_model, train, test)``), or
:class:`DataSets`, what a caller's data factory returned (loaders, datasets, pipelines), checked
and made ready by the backend (:meth:`ParityOps.prepare_parity`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..target import Target
    from .report import RunRecord



@dataclass(frozen=True, kw_only=True)
class Arrays:
    """Inputs and class indices in memory, for training and validation: NumPy arrays for the
    built-in datasets (:func:`ampkit.parity.datasets.load`: float32 inputs, images NCHW, int64
    targets), or a framework's own tensors from its library entry. Checked (:meth:`check`) by the
    :class:`ParityData` that holds them, after its own arguments, so the library names the first
    wrong one: as many targets as inputs in each part, at least one."""

    x_train: object
    y_train: object
    x_test: object
    y_test: object

    def check(self) -> None:
        """One :class:`~ampkit.errors.UsageError` naming the part (``train``/``test``) that is not arrays."""
        from ..errors import UsageError

        for part, x, y in (("train", self.x_train, self.y_train), ("test", self.x_test, self.y_test)):
            try:
                nx, ny = len(x), len(y)
            except TypeError:
                raise UsageError(f"{part} must be (inputs, targets) arrays or tensors; received {type(x).__name__}")
            if nx != ny or nx == 0:
                raise UsageError(f"{part} needs as many targets as inputs, at least one; received {nx} inputs, {ny} targets")

    @classmethod
    def of(cls, train, test) -> Arrays:
        """From ``(inputs, targets)`` pairs (a part that is not a pair is refused when checked)."""
        def pair(part):
            return tuple(part) if isinstance(part, (tuple, list)) and len(part) == 2 else (part, None)

        (x, y), (xt, yt) = pair(train), pair(test)
        return cls(x_train=x, y_train=y, x_test=xt, y_test=yt)


@dataclass(frozen=True, kw_only=True)
class DataSets:
    """A caller's own data: what the data factory returned for training and validation (torch
    ``Dataset``s or ``DataLoader``s, batched ``tf.data.Dataset``s, ``(inputs, targets)`` arrays),
    or, after :meth:`ParityOps.prepare_parity`, the backend's ready form of them. ``factory`` makes
    them again (:meth:`rebuilt`: a tf.data pipeline is rebuilt for every run, so its shuffling
    repeats in every mode); ``spec`` names the factory in messages."""

    train: object
    test: object
    factory: Callable | None = None
    spec: str | None = None

    @classmethod
    def from_factory(cls, factory: Callable, spec: str) -> DataSets:
        """Call the data factory (a failure is one line naming ``spec``): it must return
        ``(train, validation)``, two data sets."""
        from ..errors import UsageError
        from ..factory import call_user

        parts = call_user(factory, spec)
        if not (isinstance(parts, (tuple, list)) and len(parts) == 2):
            what = f"a {type(parts).__name__}" + (f" of {len(parts)}" if isinstance(parts, (tuple, list)) else "")
            raise UsageError(f"{spec}() returned {what}; expected (train, validation): two data sets")
        return cls(train=parts[0], test=parts[1], factory=factory, spec=spec)

    def rebuilt(self) -> DataSets:
        """The factory called again (after a run's seeding): fresh pipelines in the same order."""
        return DataSets.from_factory(self.factory, self.spec or "the data factory")


@dataclass(frozen=True, kw_only=True)
class ParityData:
    """What every run of a parity trains on, built with keywords.

    ``name``: the dataset's name in the report. ``model``: a built-in architecture name (``"mlp"``:
    64 features; ``"cnn"``: 1x28x28 images; 10 classes) or a zero-argument factory returning a
    fresh float32 model (called after seeding), named ``model_spec`` in messages. ``source``: the
    data, :class:`Arrays` or :class:`DataSets`. ``epochs``: the default when the config names none;
    ``steps``: optimizer steps per run instead. ``loss_fn``/``metric_fn``: the framework's
    ``(logits, targets) -> scalar``; None for the defaults (cross-entropy and accuracy for arrays;
    for data sets, :meth:`ParityOps.prepare_parity` settles them and ``metric`` (its name) and
    ``higher_is_better``). ``plan``: the precision plan mode ``plan:<default>`` trains with.
    ``chance``: the best constant predictor on the validation data
    (:func:`ampkit.parity.chance.of_targets`), which :meth:`ParityOps.prepare_parity` sets when the
    metric has one (None: unknown), so that a baseline at chance is told apart."""

    name: str
    model: str | Callable[[], object]
    source: Arrays | DataSets
    epochs: int
    batch_size: int = 64
    lr: float = 1e-3
    loss_fn: Callable | None = None
    metric_fn: Callable | None = None
    model_spec: str | None = None
    metric: str = "accuracy"
    higher_is_better: bool = True
    steps: int | None = None
    plan: dict | None = None
    chance: object = None  # the best constant predictor (ampkit.parity.chance.Chance), set by prepare_parity

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
        if not isinstance(self.source, (Arrays, DataSets)):
            raise TypeError(f"ParityData.source is Arrays or DataSets; received {type(self.source).__name__}")
        if isinstance(self.source, Arrays):  # a data factory's data sets: the backend checks them (prepare_parity)
            self.source.check()

    @property
    def arrays(self) -> Arrays | None:
        """The data when it is in memory (:class:`Arrays`), else None."""
        return self.source if isinstance(self.source, Arrays) else None

    @property
    def sets(self) -> DataSets | None:
        """A data factory's data sets (:class:`DataSets`), else None."""
        return self.source if isinstance(self.source, DataSets) else None

    @property
    def data_spec(self) -> str | None:
        """The data factory's name in messages (None for arrays)."""
        return self.sets.spec if self.sets is not None else None


@runtime_checkable
class ParityOps(Protocol):
    def prepare_parity(self, data: ParityData, target: Target) -> ParityData:
        """Check a caller's model and data before any training and return them ready for
        :meth:`train_seed`: the data factory's parts are data sets this framework reads, not empty,
        of ``(input, target)`` items; the model factory returns a model (or an ``ampkit.Workload``)
        that takes a batch of each part and gives a scalar loss. Settles ``metric`` (``accuracy``
        for class targets, else ``loss``), ``higher_is_better`` and ``chance`` (from the validation
        targets, :func:`ampkit.parity.chance.of_targets`). Anything wrong is one
        :class:`~ampkit.errors.UsageError` line."""

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


def loader_order(n: int, seed: int, epoch: int):
    """The order of the training samples in one epoch of one seed: the same in every mode and
    in both frameworks, so the runs of a seed are paired."""
    import numpy as np

    return np.random.default_rng(seed * 1000 + epoch).permutation(n)


def of_targets(targets, metric: str, classes: bool, default_loss: bool = True):
    """The best constant predictor of the validation ``targets`` (:func:`ampkit.parity.chance.of_targets`):
    what :meth:`ParityOps.prepare_parity` sets as ``ParityData.chance`` (a backend reaches it through
    this protocol, as it reaches :func:`loader_order`)."""
    from .chance import of_targets as constant_predictor

    return constant_predictor(targets, metric, classes, default_loss)
