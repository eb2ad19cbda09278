"""Parity, once for every framework: the modes to compare (``auto`` resolved on the device), every
seed in every mode through the backend's :meth:`~ampkit.parity.ops.ParityOps.train_seed`, the
statistics and verdicts (:func:`ampkit.parity.core.summarize`), the report.

The CLI (a built-in dataset) and the library (``ampkit.parity``: a caller's own model and data)
both run through :func:`run`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..errors import UsageError
from .config import ParityConfig
from .core import summarize
from .datasets import load
from .ops import ParityData
from .report import ParityReport, RunRecord


def resolve_modes(modes, support, where: str, auto=None) -> tuple[list[str], str | None]:
    """The modes to compare, fp32 (the baseline) first: the given ones, each of which must run
    here (else a usage error saying why), or, when none are given, every mode that runs here.

    ``modes``: canonical modes (a :class:`ParityConfig`'s) or None. ``support(mode) -> (ok, why)``
    is the framework's capability check; ``where`` ends the error ("on cpu"); ``auto() -> (mode,
    reason)`` resolves ``auto`` in the list (the mode it names is compared once, wherever it
    stands). Returns the modes and, when ``auto`` was asked for, a note saying what it resolved to.
    """
    note = None
    if modes is None:
        chosen = [m for m in ("fp32", "tf32", "bf16", "fp16") if support(m)[0]]
    else:
        chosen = list(modes)
        if "auto" in chosen:
            if auto is None:
                raise UsageError("mode 'auto' needs the framework's auto choice; name the modes instead")
            resolved, reason = auto()
            note = f"auto resolves to {resolved} here ({reason})"
            chosen = list(dict.fromkeys(resolved if m == "auto" else m for m in chosen))
        for m in chosen:
            ok, why = support(m)
            if not ok:
                raise UsageError(f"mode {m!r} cannot run {where}: {why}")
    return (chosen if "fp32" in chosen else ["fp32"] + chosen), note


class SeedRecords(list):
    """The runs of :func:`run_seeds`; ``interrupted`` when Ctrl-C or SIGTERM stopped the loop."""

    interrupted: bool = False


def run_seeds(modes: list[str], seeds: list[int], train_one: Callable[[str, int, Callable | None], RunRecord],
              progress=None) -> SeedRecords:
    """Every (seed, mode) run, seeds outermost (a seed's modes run back to back);
    ``train_one(mode, seed, on_epoch)`` is the backend's training of one run.

    Ctrl-C or SIGTERM stops the loop and keeps the seeds whose every mode finished (a seed with
    some modes missing cannot be paired, so its runs are dropped); ``interrupted`` is then set.
    """
    records = SeedRecords()
    try:
        for seed in seeds:
            done = []
            for mode in modes:
                cb = (lambda d, total, _m=mode, _s=seed: progress(_m, _s, d, total)) if progress else None
                done.append(train_one(mode, seed, cb))
            records.extend(done)
    except KeyboardInterrupt:
        records.interrupted = True
    return records


def run(config: ParityConfig, backend="auto", *, data: ParityData | None = None,
        progress: Callable[[str, int, int, int], None] | None = None) -> ParityReport:
    """Parity of ``config``'s modes against fp32 on ``backend`` (a Backend, or a framework name:
    ``auto``, ``torch``, ``tensorflow``, a registered one).

    ``data``: what to train (a caller's own model and data); None loads ``config.dataset``, a
    built-in one, before the framework is asked for anything. ``progress(mode, seed, epochs_done,
    epochs)`` after each epoch. Ctrl-C or SIGTERM ends the loop early: the report keeps the seeds
    whose every mode finished and says ``interrupted``.
    """
    from ..backends import get_backend

    data = data if data is not None else load(config.dataset)
    if isinstance(backend, str):
        backend = get_backend(backend)
    target = backend.target(config.device)
    modes, note = resolve_modes(config.modes, lambda m: backend.mode_support(m, target), f"on {target.label}",
                                auto=lambda: backend.resolve_auto(target))
    epochs = config.epochs or data.epochs
    t0 = time.perf_counter()
    records = run_seeds(modes, config.seed_list, lambda mode, seed, on_epoch: backend.train_seed(
        data, mode, seed, target, epochs=epochs, on_epoch=on_epoch), progress)
    results = summarize(records, modes, config.tolerance)
    return ParityReport(data.name, target.label, results, backend.environment(target), config.tolerance, epochs,
                        elapsed_s=round(time.perf_counter() - t0, 3), interrupted=records.interrupted, note=note)
