"""``ampkit.parity(make_model, train, test, *, modes=None, seeds=3, epochs=10, ...)``: does mixed
precision converge like fp32? Statistics over seeds.

This package holds the flow every framework shares (:mod:`.driver`: modes, the seed x mode loop,
statistics, verdicts, the report); a backend only trains one seed in one mode
(:class:`~ampkit.parity.ops.ParityOps`). The module itself is callable, so
``ampkit.parity(...)`` is the entry point (PyTorch or Keras: the model's framework) whether or not
this package has been imported; ``help(ampkit.parity)`` and ``inspect.signature(ampkit.parity)`` show
its parameters.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

from .._callable import make_callable

if TYPE_CHECKING:
    from .report import ParityReport

__all__ = ["Arrays", "DataSets", "ParityConfig", "ParityData", "ParityReport", "ParityResult", "RunRecord", "parity"]


def parity(make_model=None, train=None, test=None, *, model=None, data=None, modes=None, seeds=3, epochs=None,
           steps=None, batch_size=64, lr=1e-3, tolerance=0.01, margin=None, device="auto", loss_fn=None,
           metric_fn=None, dataset="custom", framework="auto", progress=None, timeout=1800.0) -> ParityReport:
    """Parity on your own model and data: does each mode train as well as fp32?

    Every seed trains a fresh model in every mode from the same initial weights and data order;
    a one-sided paired t-test over the seeds says whether each mode is worse than fp32 by more than
    ``tolerance`` (``pass``, ``fail``, or ``inconclusive`` when neither is shown), and a TOST says
    whether it is equivalent within ``margin`` (with the seeds that would decide when it cannot).

    Args:
        make_model: zero-argument callable returning a fresh float32 ``torch.nn.Module`` (or
            ``keras.Model``), called after seeding, so each seed gives the same initial weights in
            every mode.
        train, test: ``(inputs, targets)`` tensors or arrays (Keras: read as a data factory's arrays),
            or data sets as a data factory returns them (``data=`` below): torch ``Dataset``s or
            ``DataLoader``s, batched ``tf.data.Dataset``s -- trained exactly as ``data=`` (and
            ``ampkit parity --data``) trains them, 3 epochs by default.
        model, data: instead of the three above (and for Keras): a model factory (a callable, or
            ``"MODULE:FACTORY"``) returning a fresh model or an ``ampkit.Workload`` (a
            ``keras.Model`` with ``framework="tensorflow"``), and a data factory (a callable or
            ``"MODULE:FACTORY"``) returning ``(train, validation)``: torch ``Dataset``s or
            ``DataLoader``s, ``tf.data.Dataset``s (batched), or ``(inputs, targets)`` arrays. The
            metric is accuracy for class targets, else the validation loss (lower is better).
        modes: list or comma string (``"fp32,bf16,fp16"``); fp32 is the baseline and is added when
            missing; ``auto`` stands for the mode auto picks on this device (the report's ``note``
            says which). Default: every mode the device supports.
        seeds: how many seeds (0, 1, 2, ...) or an explicit list.
        epochs, steps, batch_size, lr: the training run (AdamW) of each seed and mode; ``steps``
            (optimizer steps) instead of ``epochs`` for large data. Default: 10 epochs for tensors,
            3 with ``data``.
        tolerance: how much worse than fp32 (absolute metric) still counts as parity.
        margin: the equivalence margin (+-, the metric's units); default ``tolerance``.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        loss_fn: ``loss_fn(logits, targets) -> scalar`` (default: cross-entropy).
        metric_fn: ``metric_fn(logits, targets) -> scalar``, higher is better (default: accuracy).
        dataset: the name the report shows; with no model and data, a built-in dataset to run as
            ``ampkit parity --dataset NAME`` does (``"digits"``, ``"mnist5k"``).
        framework: ``auto`` (default): the model's framework, told by the data (torch tensors,
            ``Dataset``s, ``DataLoader``s; ``tf.data``, TensorFlow tensors) or else by what the model
            factory returns (called once more to see); with neither, and for a built-in dataset,
            torch when it can be imported, else tensorflow. ``torch`` or ``tensorflow`` says it; any
            other name is a :class:`~ampkit.errors.UsageError` (a ``ValueError``).
        progress: optional callback ``progress(mode, seed, done, total)``; in a Jupyter kernel the
            default (None) shows one display in the cell that updates as runs go; ``False``: nothing.
        timeout: seconds each run may take (None: no limit); a run past it fails its mode, the rest go on.

    Returns:
        ParityReport: per mode the seeds, final loss and metric (mean, std), the difference from
        fp32, the p-value, the verdict (``baseline``, ``pass``, ``fail``, ``inconclusive``) and the
        ``equivalence``; ``.to_dict()`` is the JSON document ``ampkit parity --json`` writes. Under
        torchrun the runs are spread over the ranks: rank 0 returns the report of all, the others None.
    """
    from ..progress import shown

    return shown(progress, f"parity {dataset}", "parity", lambda cb, _live: _parity(
        make_model, train, test, model=model, data=data, modes=modes, seeds=seeds, epochs=epochs, steps=steps,
        batch_size=batch_size, lr=lr, tolerance=tolerance, margin=margin, device=device, loss_fn=loss_fn,
        metric_fn=metric_fn, dataset=dataset, framework=framework, progress=cb, timeout=timeout))


def _parity(make_model, train, test, *, model, data, modes, seeds, epochs, steps, batch_size, lr, tolerance, margin,
            device, loss_fn, metric_fn, dataset, framework, progress, timeout) -> ParityReport:
    from ..registry import auto_has_choice, framework_of, is_data_set, made_by, parse_framework
    from .config import ParityConfig
    from .driver import run
    from .factories import USER_EPOCHS
    from .ops import Arrays, DataSets, ParityData

    framework = parse_framework(framework)  # a bad name: one UsageError (a ValueError) before anything runs
    asked = {"modes": modes, "seeds": seeds, "epochs": epochs, "tolerance": tolerance, "device": device,
             "margin": margin, "steps": steps, "timeout": timeout}
    _check_arguments(train, test, loss_fn, metric_fn, dataset)
    if all(x is None for x in (make_model, train, test, model, data)) and dataset != "custom":
        from .datasets import check_dataset  # a built-in dataset, as `ampkit parity --dataset NAME` runs it

        return run(ParityConfig(dataset=check_dataset(dataset), **asked), framework, progress=progress)
    config = ParityConfig(dataset=dataset, **asked)  # checked before any user code runs
    sizes = {"batch_size": batch_size, "lr": lr, "loss_fn": loss_fn, "metric_fn": metric_fn}
    if model is not None or data is not None:
        model, data, spec = _factories(make_model, train, test, model, data, config.timeout)
        sets = DataSets.from_factory(data, spec)
        pd = ParityData(name=dataset, model=model, model_spec=getattr(model, "__name__", "model"), source=sets,
                        epochs=USER_EPOCHS, **sizes)
        if framework == "auto" and auto_has_choice():  # the data says, else what the model factory returns
            framework = framework_of(sets.train, sets.test) or made_by(model, pd.model_spec) or framework
        return run(config, framework, data=pd, progress=progress)
    if is_data_set(train) or is_data_set(test):  # Datasets/DataLoaders/tf.data: as a data factory's (issue #49)
        sets = DataSets(train=train, test=test, factory=lambda: (train, test), spec="the train/test data")
        pd = ParityData(name=dataset, model=make_model, model_spec=getattr(make_model, "__name__", "make_model"),
                        source=sets, epochs=USER_EPOCHS, **sizes)
        if framework == "auto" and auto_has_choice():
            framework = framework_of(train, test) or made_by(make_model, pd.model_spec) or framework
        return run(config, framework, data=pd, progress=progress)
    pd = ParityData(name=dataset, model=make_model, source=Arrays.of(train, test), epochs=10, **sizes)
    if framework == "auto" and auto_has_choice():
        framework = framework_of(train, test) or made_by(make_model, "make_model") or framework
    return run(config, framework, data=pd, progress=progress)


def _factories(make_model, train, test, model, data, timeout):
    """``model=``/``data=``: two factories (callables, or ``"MODULE:FACTORY"`` loaded here) and the
    data factory's name; a usage error for anything else or for a mix with make_model/train/test."""
    from ..errors import UsageError

    if make_model is not None or train is not None or test is not None:
        raise UsageError("give make_model, train and test, or model= and data=, not both")
    if model is None or data is None:
        raise UsageError("model= needs data= too (and data= needs model=)")
    spec = data if isinstance(data, str) else None
    if isinstance(model, str) or isinstance(data, str):
        from ..factory import check_findable, load_factory
        from .factories import check_isolated

        for spec, flag in ((data, "data"), (model, "model")):
            if isinstance(spec, str):
                check_findable(spec, flag)  # a module that cannot be found: one line before any child

        # as the CLI does: the strings' factories called in a child first (one that exits, aborts or
        # hangs is a UsageError naming it, never the end of the caller's process)
        check_isolated(model if isinstance(model, str) else None, data if isinstance(data, str) else None,
                       timeout, flags=("model", "data"))
        model = load_factory(model, flag="model") if isinstance(model, str) else model
        data = load_factory(data, flag="data") if isinstance(data, str) else data
    if not callable(model) or not callable(data):
        raise UsageError("model= and data= must be factories (zero-argument callables or 'MODULE:FACTORY'); "
                         f"received {type(model).__name__} and {type(data).__name__}")
    return model, data, spec or getattr(data, "__name__", "data")


def _check_arguments(train, test, loss_fn, metric_fn, dataset) -> None:
    """The library's own arguments, refused up front in one UsageError as the CLI refuses a flag
    (a loss_fn that is not callable failed every run, and fp32 'failed too')."""
    from ..errors import UsageError
    from ..registry import is_data_set

    for name, part in (("train", train), ("test", test)):
        if part is not None and not (isinstance(part, (tuple, list)) and len(part) == 2) and not is_data_set(part):
            got = f"a {type(part).__name__}" + (f" of {len(part)}" if isinstance(part, (tuple, list)) else "")
            raise UsageError(f"{name} must be (inputs, targets), a torch Dataset or DataLoader, or a tf.data.Dataset; "
                             f"received {got}")
    for name, fn in (("loss_fn", loss_fn), ("metric_fn", metric_fn)):
        if fn is not None and not callable(fn):
            raise UsageError(f"{name} must be callable (logits, targets) -> scalar; received {type(fn).__name__}")
    if not isinstance(dataset, str) or not dataset.strip():
        raise UsageError(f"dataset must be a name (a string); received {dataset!r}")


make_callable(__name__, parity, ("config", "ops", "report"))
#: ``inspect.signature(ampkit.parity)`` (the module is callable) is the function's, not ``(*args, **kwargs)``
__signature__ = inspect.signature(parity)
