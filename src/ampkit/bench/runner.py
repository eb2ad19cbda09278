"""What a bench run does the same way for every framework.

Every requested mode runs in a spawned child of its own (so memory peaks never leak between modes):
interleaved, all children alive and timed in alternating rounds (:mod:`.interleave`), or one fresh
child after another (``--batch-size auto``, whose search needs the device to itself; each trial of
a backend that cannot hand its memory back). The child sends its row back as JSON (no pickled
results). The relative figures (speedup, memory saving), TFLOP/s and MFU, the step-time summary
and the ``--batch-size auto`` search around the backend's trial are computed here, once.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import replace

from ..errors import one_line
from ..host_memory import SEARCH_ENV
from ..isolation import child_starts, describe_exit, main_not_rerun, run_exit_hooks, sigint_blocked, stop
from ..threads import timing_cpus
from .ops import MeasureRequest
from .report import BenchRow, derive_relative
from .rows import search_batch
from .session import measure_mode


class TrialFailed(Exception):
    """A --batch-size auto trial failed for a reason other than memory: its row says why."""

    def __init__(self, row: BenchRow):
        super().__init__(row.error)
        self.row = row


def run_modes(modes, repeats: int, run_one: Callable[[str], BenchRow], *, steps: int, progress=None, on_row=None,
              fresh: bool = True, interleaved=None, sets: int = 1) -> tuple[list[BenchRow], bool]:
    """Every mode, ``repeats`` times (:mod:`.repeats`); the repeats folded into one row per mode with
    the relative figures. ``interleaved(modes, k)`` -> (rows by mode, interrupted): the ``k``-th
    interleaved run of ``modes`` (:func:`.interleave.run_interleaved`), ``repeats * sets`` of them (a
    repeat's rounds split over ``sets`` sets of processes, :func:`.rounds.process_sets`), the order
    flipped every run; without it each mode in turn by ``run_one(mode)``. Ctrl-C keeps the rows that
    finished (returns ``interrupted``). ``fresh``: each run is a fresh process (the progress says so
    when a mode starts)."""
    from .repeats import fold, sequence

    runs: dict[str, list[BenchRow]] = {}
    interrupted = False
    try:
        if interleaved is not None:
            for k in range(repeats * sets):
                order = list(modes) if k % 2 == 0 else list(reversed(modes))
                if k % sets:  # a later set of the same repeat: a mode that failed in an earlier one has its row
                    order = [m for m in order if runs.get(m) and runs[m][-1].status == "ok"]
                    if not order:  # the modes still ok run their sets: each times the --steps asked
                        continue
                got, interrupted = interleaved(order, k)
                for mode in modes:
                    if mode in got:
                        runs.setdefault(mode, []).append(got[mode])
                if interrupted:
                    break
        else:
            for k, mode in sequence(modes, repeats):
                if progress and fresh:
                    progress({"mode": mode, "kind": "start", "repeat": k + 1, "repeats": repeats, "steps": steps})
                row = run_one(mode)
                runs.setdefault(mode, []).append(row)
                if on_row:
                    on_row(row)
    except KeyboardInterrupt:
        interrupted = True
    rows = fold(runs, modes, repeats, sets)
    derive_relative(rows, runs if repeats > 1 else None)
    return rows, interrupted


def search_in_children(spec: str, request: MeasureRequest, start: int, progress=None) -> BenchRow:
    """``--batch-size auto`` with every trial in a fresh child (:func:`run_child`), then the measured
    run at the batch found, for a backend whose memory a finished trial keeps (TensorFlow's
    clear_session does not return it on a CPU: trials in one process would inflate each other's peaks)."""
    cfg, mode = request.config, request.mode
    row = BenchRow(mode, steps=cfg.steps)

    def trial(b: int) -> tuple[bool, int | None]:
        short = replace(cfg, batch_size=b, memory_budget=None, steps=2, warmup=1)
        got = run_child(spec, replace(request, config=short), search=True)
        if got.status not in ("ok", "oom"):
            raise TrialFailed(got)
        return got.status == "ok", got.peak_memory_bytes

    try:
        best = search_batch(row, trial, start, cfg.search_cap, cfg.memory_budget, mode_progress(progress, mode))
    except TrialFailed as failed:
        return failed.row  # unsupported or error: the trial's own row says why
    if best is None:
        return row
    measured = run_child(spec, replace(request, config=replace(cfg, batch_size=best, memory_budget=None)), progress)
    measured.max_batch_size, measured.search = best, row.search
    return measured


def mode_progress(progress, mode: str):
    """A backend's ``progress(kind, done, total)`` as the driver's progress messages for ``mode``."""
    if progress is None:
        return lambda *a: None
    return lambda kind, done, total: progress({"mode": mode, "kind": kind, "done": done, "total": total})


@contextlib.contextmanager
def pinned(cpus: frozenset | None):
    """The calling thread on ``cpus`` while a child starts (a new process inherits its starter's CPU
    set), then back on its own; None or a platform without affinity: nothing changes."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def child_cpus(target, threads: int | None) -> frozenset | None:
    """The CPUs a mode's child times on: every mode the same (:func:`ampkit.threads.timing_cpus`); None
    on an accelerator (its host threads are left to the scheduler)."""
    return None if target.accelerator else timing_cpus(threads)


def spawn(target, args: tuple, duplex: bool = False, search: bool = False, cpus: frozenset | None = None):
    """A started spawned child running ``target(conn, *args)`` -> (process, the parent's end of the
    pipe). Started with SIGINT blocked and without re-running the caller's script; a child that
    searches ``--batch-size auto`` (``search``) under the search's allocator setting
    (:data:`ampkit.host_memory.SEARCH_ENV`), every other one under the allocator's own; ``cpus``: the
    child may run on those CPUs only (:func:`ampkit.threads.timing_cpus`), the caller's own set untouched."""
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=duplex)
    proc = ctx.Process(target=target, args=(send, *args), daemon=True)
    env = SEARCH_ENV if search else {}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with sigint_blocked(), main_not_rerun(), pinned(cpus):  # a script calling ampkit.bench at its top level is not re-run
            proc.start()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    send.close()
    return proc, recv


def run_child(spec: str, request: MeasureRequest, progress=None, search: bool = False) -> BenchRow:
    """Measure ``request`` in a fresh spawned process: the backend at ``spec`` (``"module:Class"``,
    :func:`ampkit.registry.load_backend`) measures the mode there (:func:`serve_mode`) and
    sends JSON messages back (progress, then the row). A worker that dies yields an error row (an oom
    row when it was SIGKILLed, the out-of-memory killer's signal); one past ``--timeout`` is stopped."""
    mode, timeout = request.mode, request.config.timeout
    proc, recv = spawn(serve_mode, (spec, request), search=search or request.config.batch_size == "auto",
                       cpus=child_cpus(request.target, request.config.threads))
    row = None
    deadline = time.monotonic() + timeout if timeout else None
    try:
        while row is None:
            if recv.poll(0.1):
                try:
                    msg = json.loads(recv.recv_bytes())
                except EOFError:
                    break
                if msg["type"] == "result":
                    row = BenchRow.from_dict(msg["row"])
                elif progress:
                    progress({"mode": mode, **msg})
            elif not proc.is_alive() and not recv.poll(0):
                break
            elif deadline is not None and time.monotonic() > deadline:
                stop(proc)
                return BenchRow(mode, status="error", error=f"no result after {timeout:g} s (--timeout); "
                                                          "the worker was stopped")
    except BaseException:  # Ctrl-C, SIGTERM: no orphan keeps running
        stop(proc)
        raise
    proc.join(10)
    stop(proc)
    if row is None:
        code = proc.exitcode
        killed = code is not None and code < 0 and -code == 9
        row = BenchRow(mode, status="oom" if killed else "error",
                       error=("the worker was killed (SIGKILL), most likely by the out-of-memory killer"
                              if killed else f"the worker process {describe_exit(code)} without a result"))
    return row


def serve_mode(conn, spec: str, request: MeasureRequest) -> None:
    """Entry of the per-mode child: the parent's backend, loaded by its spec (so a backend added
    with :func:`ampkit.registry.register_backend` works here too), measures the mode."""
    def measure(progress) -> BenchRow:
        from ..registry import load_backend

        return measure_mode(load_backend(spec), request, progress)

    serve_row(conn, request.mode, measure)


def serve_row(conn, mode: str, make_row) -> None:
    """In a bench child: ``make_row(progress)`` -> BenchRow, sent to the parent as JSON, with
    progress messages on the way. Any failure still sends a row."""
    child_starts()

    def send(msg: dict) -> None:
        conn.send_bytes(json.dumps(msg).encode())

    try:
        row = make_row(lambda kind, done, total: send({"type": "progress", "kind": kind, "done": done, "total": total}))
        send({"type": "result", "row": row.to_dict()})
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # last resort: the parent still gets a row
        send({"type": "result", "row": BenchRow(mode, status="error", error=one_line(exc, 500)).to_dict()})
    finally:
        conn.close()
        run_exit_hooks()  # e.g. torch.compile's worker pool (isolation.at_child_exit)
        os._exit(0)  # skip interpreter teardown (CUDA contexts, threads): the row is sent
