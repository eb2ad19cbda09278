"""Parity, once for every framework: the modes to compare (``auto`` resolved on the device), every
seed in every mode through the backend's :meth:`~ampkit.parity.ops.ParityOps.train_seed`, the
statistics and verdicts (:func:`ampkit.parity.core.summarize`), the report.

The CLI (a built-in dataset) and the library (``ampkit.parity``: a caller's own model and data)
both run through :func:`run`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..errors import UsageError, one_line
from ..factory import call_user, load_factory
from .config import ParityConfig
from .core import summarize
from .datasets import load
from .ops import ParityData
from .report import ParityReport, RunRecord

#: epochs per run for a caller's data when neither --epochs nor --steps is given
USER_EPOCHS = 3


def _trains(backend, mode: str, target) -> tuple[bool, bool, str]:
    """``(ok, emulated, why)``: the backend's engine trains ``mode`` here, natively or emulated."""
    return backend.training_support(mode, target)


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


@dataclass(frozen=True)
class RunStatus:
    """Where the seed x mode loop stands, for progress lines: ``run`` of ``runs`` (1-based), the
    seed's index of ``seeds``, and the estimated seconds left (None before any run finished)."""

    mode: str
    seed: int
    seed_index: int
    seeds: int
    run: int
    runs: int
    elapsed_s: float
    eta_s: float | None
    finished: bool = False

    def left(self) -> str:
        """``about 1:05 left`` (empty before any run has finished)."""
        return f"about {_clock(self.eta_s)} left" if self.eta_s is not None else ""

    def words(self) -> str:
        eta = f", {self.left()}" if self.eta_s is not None else ""
        state = "done" if self.finished else "training"
        return (f"parity: seed {self.seed} ({self.seed_index}/{self.seeds}), {self.mode} {state} "
                f"[run {self.run}/{self.runs}, {_clock(self.elapsed_s)} elapsed{eta}]")


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _eta(times: dict[str, list[float]], pending: list[str]) -> float | None:
    """Seconds left: each pending run at its mode's mean so far (a mode not yet timed: the mean of all)."""
    every = [t for ts in times.values() for t in ts]
    if not every:
        return None
    mean_all = sum(every) / len(every)
    return sum(sum(times[m]) / len(times[m]) if times.get(m) else mean_all for m in pending)


def _guarded(train_one, mode: str, seed: int, cb) -> RunRecord:
    """One run; a run that raises (not a usage error, not Ctrl-C) is recorded as failed and the loop goes on."""
    t0 = time.perf_counter()
    try:
        return train_one(mode, seed, cb)
    except (UsageError, KeyboardInterrupt):
        raise
    except Exception as exc:
        return RunRecord(mode, seed, [], [], [], 0, time.perf_counter() - t0, error=one_line(exc))


def run_seeds(modes: list[str], seeds: list[int], train_one: Callable[[str, int, Callable | None], RunRecord],
              progress=None, on_run: Callable[[RunStatus], None] | None = None) -> SeedRecords:
    """Every (seed, mode) run, seeds outermost (a seed's modes run back to back);
    ``train_one(mode, seed, on_epoch)`` is the backend's training of one run. ``on_run(status)``
    as each run starts and ends, with an estimate of the time left.

    Ctrl-C or SIGTERM stops the loop and keeps the seeds whose every mode finished (a seed with
    some modes missing cannot be paired, so its runs are dropped); ``interrupted`` is then set.
    A run that raises is recorded with its error (the mode then fails) and the loop goes on.
    """
    records = SeedRecords()
    times: dict[str, list[float]] = {}
    plan = [(s, m) for s in seeds for m in modes]
    t_start = time.perf_counter()

    def status(k: int, finished: bool) -> RunStatus:
        seed, mode = plan[k]
        pending = [m for _, m in plan[k + 1 if finished else k:]]
        return RunStatus(mode, seed, seeds.index(seed) + 1, len(seeds), k + 1, len(plan),
                         time.perf_counter() - t_start, _eta(times, pending), finished)

    try:
        for si, seed in enumerate(seeds):
            done = []
            for mi, mode in enumerate(modes):
                k = si * len(modes) + mi
                if on_run:
                    on_run(status(k, False))
                cb = (lambda d, total, _m=mode, _s=seed: progress(_m, _s, d, total)) if progress else None
                t0 = time.perf_counter()
                done.append(_guarded(train_one, mode, seed, cb))
                times.setdefault(mode, []).append(time.perf_counter() - t0)
                if on_run:
                    on_run(status(k, True))
            records.extend(done)
    except KeyboardInterrupt:
        records.interrupted = True
    return records


def user_data(config: ParityConfig) -> ParityData:
    """``--model MODULE:FACTORY --data MODULE:FACTORY``: the model factory (called per run, after
    seeding) and what the data factory returns, ``(train, validation)``; one usage line for a
    factory that cannot be imported or called or returns something else."""
    make_model = load_factory(config.model, flag="--model")
    make_data = load_factory(config.data, flag="--data")
    sizes = {k: v for k, v in (("lr", config.lr), ("batch_size", config.batch_size)) if v is not None}
    return ParityData(config.model.split(":")[0], None, None, None, None, model=make_model, epochs=USER_EPOCHS,
                      **split_data(make_data, config.data), data_factory=make_data, model_spec=config.model,
                      data_spec=config.data, **sizes)


def split_data(make_data, spec: str) -> dict:
    """``{"train": ..., "test": ...}`` from a data factory's ``(train, validation)``."""
    parts = call_user(make_data, spec)
    if not (isinstance(parts, (tuple, list)) and len(parts) == 2):
        what = f"a {type(parts).__name__}" + (f" of {len(parts)}" if isinstance(parts, (tuple, list)) else "")
        raise UsageError(f"{spec}() returned {what}; expected (train, validation): two data sets")
    return {"train": parts[0], "test": parts[1]}


def run(config: ParityConfig, backend="auto", *, data: ParityData | None = None,
        progress: Callable[[str, int, int, int], None] | None = None,
        on_run: Callable[[RunStatus], None] | None = None) -> ParityReport:
    """Parity of ``config``'s modes against fp32 on ``backend`` (a Backend, or a framework name:
    ``auto``, ``torch``, ``tensorflow``, a registered one).

    ``data``: what to train (a caller's own model and data); None loads ``config.model``/``data``
    (factories) or ``config.dataset`` (a built-in one, before the framework is asked for anything).
    Either way the backend checks it before any training (``prepare_parity``). ``progress(mode,
    seed, done, total)`` after each epoch (each step with ``--steps``); ``on_run(status)`` as each
    run starts and ends (:class:`RunStatus`, with an ETA). Ctrl-C or SIGTERM ends the loop early:
    the report keeps the seeds whose every mode finished and says ``interrupted``.
    """
    from ..backends import get_backend

    if data is None:
        data = user_data(config) if config.model else load(config.dataset)
    if isinstance(backend, str):
        backend = get_backend(backend)
    target = backend.target(config.device)
    modes, note = resolve_modes(config.modes, lambda m: _trains(backend, m, target)[::2], f"on {target.label}",
                                auto=lambda: backend.resolve_auto(target))
    emulated = [m for m in modes if _trains(backend, m, target)[1]]
    if emulated:  # fp8 without fp8 hardware: torchao's emulation, the question is convergence, not speed
        note = "; ".join(filter(None, [note, f"{', '.join(emulated)} runs emulated here: its numerics, not its speed"]))
    if config.plan is not None:  # --plan: its default must run here; compared as one more mode
        label = f"plan:{config.plan['default']}"
        ok, why = _trains(backend, config.plan["default"], target)[::2]
        if not ok:
            raise UsageError(f"the plan's default mode {config.plan['default']!r} cannot run on {target.label}: {why}")
        modes = [m for m in modes if m != label] + [label]
        data = replace(data, plan=config.plan)
    if config.steps:
        data = replace(data, steps=config.steps)
    data = backend.prepare_parity(data, target)
    epochs = config.epochs or data.epochs
    t0 = time.perf_counter()
    records = run_seeds(modes, config.seed_list, lambda mode, seed, on_epoch: backend.train_seed(
        data, mode, seed, target, epochs=epochs, on_epoch=on_epoch), progress, on_run)
    results = summarize(records, modes, config.tolerance, margin=config.equivalence_margin, metric=data.metric,
                        higher_is_better=data.higher_is_better)
    for r in results:
        if r.mode.startswith("plan:"):
            r.plan = config.plan
    return ParityReport(data.name, target.label, results, backend.environment(target), config.tolerance,
                        None if config.steps else epochs, elapsed_s=round(time.perf_counter() - t0, 3),
                        interrupted=records.interrupted, note=note, margin=config.equivalence_margin,
                        steps=config.steps, metric=data.metric)
