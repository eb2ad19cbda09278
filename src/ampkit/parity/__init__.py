"""``ampkit.parity(make_model, train, test, *, modes=None, seeds=3, epochs=10, ...)``: does mixed
precision converge like fp32? Statistics over seeds.

This package holds the flow every framework shares (:mod:`.driver`: modes, the seed x mode loop,
statistics, verdicts, the report); a backend only trains one seed in one mode
(:class:`~ampkit.parity.ops.ParityOps`). The module itself is callable, so
``ampkit.parity(make_model, train, test, ...)`` is the PyTorch entry point whether or not this
package has been imported; ``help(ampkit.parity)`` and ``inspect.signature(ampkit.parity)`` show
its parameters.
"""

from __future__ import annotations

import inspect

from .._callable import make_callable
from .config import ParityConfig
from .ops import ParityData
from .report import ParityReport, ParityResult, RunRecord

__all__ = ["ParityConfig", "ParityData", "ParityReport", "ParityResult", "RunRecord", "parity"]


def parity(make_model, train, test, *, modes=None, seeds=3, epochs=10, batch_size=64, lr=1e-3, tolerance=0.01,
           device="auto", loss_fn=None, metric_fn=None, dataset="custom", progress=None) -> ParityReport:
    """Parity on your own PyTorch model and data: does each mode train as well as fp32?

    Every seed trains a fresh model in every mode from the same initial weights and data order;
    a one-sided paired t-test over the seeds says whether each mode is worse than fp32 by more than
    ``tolerance``.

    Args:
        make_model: zero-argument callable returning a fresh float32 ``torch.nn.Module`` (called
            after seeding, so each seed gives the same initial weights in every mode).
        train, test: ``(inputs, targets)`` tensors.
        modes: list or comma string (``"fp32,bf16,fp16"``); fp32 is the baseline and is added when
            missing; ``auto`` stands for the mode auto picks on this device (the report's ``note``
            says which). Default: every mode the device supports.
        seeds: how many seeds (0, 1, 2, ...) or an explicit list.
        epochs, batch_size, lr: the training run (AdamW) of each seed and mode.
        tolerance: how much worse than fp32 (absolute metric) still counts as parity.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        loss_fn: ``loss_fn(logits, targets) -> scalar`` (default: cross-entropy).
        metric_fn: ``metric_fn(logits, targets) -> scalar``, higher is better (default: accuracy).
        dataset: the name the report shows.
        progress: optional callback for progress messages.

    Returns:
        ParityReport: per mode the seeds, final loss and metric (mean, std), the difference from
        fp32, the p-value and the verdict (``baseline``, ``pass``, ``fail``); ``.to_dict()`` is
        the JSON document ``ampkit parity --json`` writes.
    """
    from .driver import run

    config = ParityConfig(dataset=dataset, modes=modes, seeds=seeds, epochs=epochs, tolerance=tolerance, device=device)
    data = ParityData(dataset, train[0], train[1], test[0], test[1], model=make_model, epochs=epochs,
                      batch_size=batch_size, lr=lr, loss_fn=loss_fn, metric_fn=metric_fn)
    return run(config, "torch", data=data, progress=progress)


make_callable(__name__, parity)
#: ``inspect.signature(ampkit.parity)`` (the module is callable) is the function's, not ``(*args, **kwargs)``
__signature__ = inspect.signature(parity)
