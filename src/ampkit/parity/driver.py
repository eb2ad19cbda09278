"""Parity, once for every framework: the modes to compare (``auto`` resolved on the device), every
seed in every mode through the backend's :meth:`~ampkit.parity.ops.ParityOps.train_seed`, the
statistics and verdicts (:func:`ampkit.parity.core.summarize`), the report.

The CLI (a built-in dataset) and the library (``ampkit.parity``: a caller's own model and data)
both run through :func:`run`.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..errors import UsageError, one_line
from ..factory import FactoryFailed
from .config import ParityConfig
from .datasets import load
from .factories import check_early, user_data
from .ops import ParityData
from .report import ParityReport, RunRecord


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
    """The runs of :func:`run_seeds`; ``interrupted`` when Ctrl-C or SIGTERM stopped the loop, and
    then ``unpaired``: the finished runs of seeds that did not finish every mode (kept apart)."""

    interrupted: bool = False
    unpaired: list = []


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
    who: str = ""       # "rank 1/2" under torchrun, "shard 2/3" in a shard


    def left(self) -> str:
        """``about 1:05 left`` (empty before any run has finished)."""
        return f"about {_clock(self.eta_s)} left" if self.eta_s is not None else ""

    def words(self) -> str:
        eta = f", {self.left()}" if self.eta_s is not None else ""
        state = "done" if self.finished else "training"
        who = f" {self.who}:" if self.who else ""
        return (f"parity:{who} seed {self.seed} ({self.seed_index}/{self.seeds}), {self.mode} {state} "
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


class RunTimedOut(Exception):
    """A run went past ``--timeout``: raised inside the run (SIGALRM), recorded as its failure."""


@contextlib.contextmanager
def _deadline(seconds: float | None):
    """``--timeout`` for one run, in this process: SIGALRM raises :class:`RunTimedOut` where the run
    is (a Python-level loop or a sleep; a single C call that never returns is not reached). Only
    in the main thread of a platform with SIGALRM; elsewhere no limit. A timer already armed (a
    caller's, pytest-timeout's) is kept: the sooner one fires, the other is re-armed afterwards."""
    if not (seconds and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()):
        yield
        return
    outer_left, outer_interval = signal.getitimer(signal.ITIMER_REAL)
    if outer_left and outer_left <= seconds:  # the outer timer fires first: it is the limit
        yield
        return

    def expire(signum, frame):
        raise RunTimedOut(f"the run took longer than --timeout {seconds:g} s and was stopped")

    t0 = time.monotonic()
    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        if outer_left:
            signal.setitimer(signal.ITIMER_REAL, max(outer_left - (time.monotonic() - t0), 1e-3), outer_interval)


def _guarded(train_one, mode: str, seed: int, cb, timeout: float | None = None) -> RunRecord:
    """One run; a run that raises (not a usage error, not Ctrl-C) or outlasts ``timeout`` is recorded
    as failed and the loop goes on."""
    t0 = time.perf_counter()
    try:
        with _deadline(timeout):
            return train_one(mode, seed, cb)
    except FactoryFailed as exc:  # the user's factory failed in this run (it passed the check): this run's failure
        return RunRecord(mode, seed, [], [], [], 0, time.perf_counter() - t0, error=str(exc))
    except (UsageError, KeyboardInterrupt):
        raise
    except Exception as exc:
        return RunRecord(mode, seed, [], [], [], 0, time.perf_counter() - t0, error=one_line(exc))


def run_seeds(modes: list[str], seeds: list[int], train_one: Callable[[str, int, Callable | None], RunRecord],
              progress=None, on_run: Callable[[RunStatus], None] | None = None, *,
              plan: list[tuple[int, str]] | None = None, whole_seeds: bool = True, who: str = "",
              on_start: Callable[[str, int], None] | None = None,
              on_done: Callable[[RunRecord], None] | None = None, timeout: float | None = None) -> SeedRecords:
    """Every (seed, mode) run, seeds outermost (a seed's modes run back to back), or the runs of
    ``plan`` ((seed, mode) pairs: a shard's, a rank's, what a resumed document lacks);
    ``train_one(mode, seed, on_epoch)`` is the backend's training of one run. ``on_run(status)``
    as each run starts and ends, with an estimate of the time left; ``on_start(mode, seed)`` and
    ``on_done(record)`` around each run.

    Ctrl-C or SIGTERM stops the loop and keeps the seeds whose every mode finished (a seed with
    some modes missing cannot be paired: its finished runs go to ``unpaired``, outside the
    statistics, for a resume to pair; with ``whole_seeds`` False every finished run is kept, for a
    merge or a resume to pair); ``interrupted`` is then set.
    A run that raises is recorded with its error (the mode then fails) and the loop goes on.
    """
    records = SeedRecords()
    times: dict[str, list[float]] = {}
    plan = [(s, m) for s in seeds for m in modes] if plan is None else list(plan)
    order = list(dict.fromkeys(s for s, _ in plan))
    t_start = time.perf_counter()

    def status(k: int, finished: bool) -> RunStatus:
        seed, mode = plan[k]
        pending = [m for _, m in plan[k + 1 if finished else k:]]
        return RunStatus(mode, seed, order.index(seed) + 1, len(order), k + 1, len(plan),
                         time.perf_counter() - t_start, _eta(times, pending), finished, who)

    try:
        for k, (seed, mode) in enumerate(plan):
            if on_run:
                on_run(status(k, False))
            if on_start:
                on_start(mode, seed)
            cb = (lambda d, total, _m=mode, _s=seed: progress(_m, _s, d, total)) if progress else None
            t0 = time.perf_counter()
            rec = _guarded(train_one, mode, seed, cb, timeout)
            times.setdefault(mode, []).append(time.perf_counter() - t0)
            if on_done:
                on_done(rec)
            records.append(rec)
            if on_run:
                on_run(status(k, True))
    except KeyboardInterrupt:
        records.interrupted = True
        if whole_seeds:
            planned, done = Counter(s for s, _ in plan), Counter(r.seed for r in records)
            records.unpaired = [r for r in records if done[r.seed] != planned[r.seed]]
            records[:] = [r for r in records if done[r.seed] == planned[r.seed]]
    return records


def run(config: ParityConfig, backend="auto", *, data: ParityData | None = None,
        progress: Callable[[str, int, int, int], None] | None = None,
        on_run: Callable[[RunStatus], None] | None = None, shard: tuple[int, int] | None = None,
        resume: tuple[str, ParityReport] | None = None, say: Callable[[str], None] | None = None) -> ParityReport | None:
    """Parity of ``config``'s modes against fp32 on ``backend`` (a Backend, or a framework name:
    ``auto``, ``torch``, ``tensorflow``, a registered one).

    ``data``: what to train (a caller's own model and data); None loads ``config.model``/``data``
    (factories) or ``config.dataset`` (a built-in one, before the framework is asked for anything).
    Either way the backend checks it before any training (``prepare_parity``). ``progress(mode,
    seed, done, total)`` after each epoch (each step with ``--steps``); ``on_run(status)`` as each
    run starts and ends (:class:`RunStatus`, with an ETA). Ctrl-C or SIGTERM ends the loop early:
    the report keeps the seeds whose every mode finished and says ``interrupted``.

    The grid (:mod:`ampkit.parity.grid`): ``shard=(I, N)`` runs the I-th of N shares and returns a
    partial report; ``resume=(path, report)`` adds ``config``'s seeds and modes to that document's
    and runs only what it lacks. Under torchrun (WORLD_SIZE > 1) the runs are spread over the
    ranks; rank 0 returns the report, the other ranks None. ``say(line)``: the grid's own news.
    """
    from ..registry import get_backend
    from . import grid as G

    if data is None and not config.model:
        data = load(config.dataset)
    checked = data is None and check_early(config, backend)  # before the framework loads (issue #49)
    if isinstance(backend, str):
        backend = get_backend(backend)
    group = _join(backend, config)
    target = group.target if group else backend.target(config.device)
    modes, note = resolve_modes(config.modes, lambda m: _trains(backend, m, target)[::2], f"on {target.label}",
                                auto=lambda: backend.resolve_auto(target))
    if config.plan is not None:  # --plan: its default must run here; compared as one more mode
        ok, why = _trains(backend, config.plan["default"], target)[::2]
        if not ok:
            raise UsageError(f"the plan's default mode {config.plan['default']!r} cannot run on {target.label}: {why}")
    if data is None:  # the user's factories (with fp8 asked for: checked once the modes are known to run
        data = user_data(config, checked)  # here, so that a broken fp8 install is said before any factory is called)
    emulated = [m for m in modes if _trains(backend, m, target)[1]]
    if emulated:  # fp8 without fp8 hardware: torchao's emulation, the question is convergence, not speed
        note = "; ".join(filter(None, [note, f"{', '.join(emulated)} runs emulated here: its numerics, not its speed"]))
    if config.plan is not None:
        label = f"plan:{config.plan['default']}"
        modes = [m for m in modes if m != label] + [label]
        data = replace(data, plan=config.plan)
    if config.steps:
        data = replace(data, steps=config.steps)
    data = backend.prepare_parity(data, target)
    epochs = config.epochs or data.epochs
    environment = backend.environment(target)
    ident = G.identity(config, data, epochs, environment)
    seeds, kept = config.seed_list, []
    if resume is not None:
        path, doc = resume
        kept = G.held(doc, ident, path)
        modes, seeds = G.union(list(doc.grid["modes"]), modes), sorted(set(doc.grid["seeds"]) | set(seeds))
    grid = {"modes": modes, "seeds": seeds, "identity": ident}
    have = {(r.mode, r.seed) for r in kept}
    todo = [(s, m) for s, m in G.plan(modes, seeds) if (m, s) not in have]
    if resume is not None and say:
        say(f"resuming {resume[0]}: it holds {len(kept)} run(s); {len(todo)} to run")
    who = ""
    if shard is not None:
        todo, who = G.share(todo, *shard), f"shard {shard[0]}/{shard[1]}"
    mine = G.share(todo, group.rank + 1, group.world) if group else todo
    if group:
        who = f"rank {group.rank}/{group.world}"
        if say:
            say(f"{who} on {target.label}: {len(mine)} of {len(todo)} run(s): "
                + (", ".join(f"{m} seed {s}" for s, m in mine) or "none"))
    t0 = time.perf_counter()
    try:
        records = run_seeds(modes, seeds, lambda mode, seed, on_epoch: backend.train_seed(
            data, mode, seed, target, epochs=epochs, on_epoch=on_epoch), progress, on_run, plan=mine,
            whole_seeds=shard is None and group is None and resume is None, who=who,
            on_start=group.started if group else None, on_done=group.post if group else None, timeout=config.timeout)
        interrupted, unpaired = records.interrupted, list(records.unpaired)
        if group and group.rank != 0:
            if interrupted:
                group.stopped()
            return None
        if group:
            owners = {(m, s): k % group.world for k, (s, m) in enumerate(todo)}
            records, interrupted = group.collect(list(records), owners, interrupted, say)
    finally:
        if group:
            group.close()
    report = G.build(kept + list(records), grid, dataset=data.name, device=target.label, environment=environment,
                     higher_is_better=data.higher_is_better, chance=data.chance,
                     shard=f"{shard[0]}/{shard[1]}" if shard else None, elapsed_s=round(time.perf_counter() - t0, 3),
                     interrupted=interrupted, note=note, world_size=group.world if group else None,
                     unpaired_runs=unpaired)
    for r in report.results:  # --plan: the plan its mode trained with
        if r.mode.startswith("plan:"):
            r.plan = config.plan
    return report


def _join(backend, config: ParityConfig):
    """Under torchrun: the backend's group (PyTorch only); None for one process."""
    import os

    if int(os.environ.get("WORLD_SIZE", "1") or 1) <= 1:
        return None
    return backend.parity_group(config.device)  # unsupported by default, saying why (ParityOps)
