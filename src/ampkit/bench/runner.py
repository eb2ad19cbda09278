"""What a bench run does the same way for every framework.

Every requested mode runs in a fresh spawned child (so memory peaks never leak between modes);
the child sends its row back as JSON (no pickled results). The relative figures (speedup, memory
saving), TFLOP/s and MFU, the step-time summary and the ``--batch-size auto`` search around the
backend's trial are computed here, once.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import replace

from ..errors import one_line
from ..isolation import describe_exit, die_with_parent, main_not_rerun, run_exit_hooks, sigint_blocked, stop
from ..timing import step_ms_summary
from .batch_search import largest_fitting
from .config import BenchConfig
from .ops import MeasureRequest
from .peaks import peak_tflops
from .report import BenchRow, derive_relative

# Large allocations are mmapped and returned on free, so a child's RSS falls after each trial
# of --batch-size auto and peaks measured by RSS do not carry over (glibc's dynamic threshold
# would otherwise keep freed blocks on the heap).
_CHILD_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def fill_timing(row: BenchRow, batch_size: int, step_s: list[float], flops: float | None, gpu: bool,
                world_size: int = 1, *, warmup: int | None = None, skipped: int = 0, warmup_skipped: int = 0,
                first_loss: float | None = None) -> None:
    """samples/s, the step-time summary, TFLOP/s and (on a known GPU) MFU of one measured run.

    samples/s is the batch over the MEDIAN step time (``step_ms.p50``): the one definition every
    speedup uses (:mod:`ampkit.bench.judge`). ``world_size`` processes each ran ``batch_size``
    samples per step (global throughput). ``skipped``/``warmup_skipped``: steps the loss scaler
    skipped in the timed window and in the warm-up.
    """
    row.batch_size = batch_size
    row.step_ms = step_ms_summary(step_s)
    row.step_times_ms = [round(s * 1e3, 6) for s in step_s]
    row.samples_per_s = batch_size * world_size / (row.step_ms["p50"] / 1e3)
    row.skipped_steps, row.warmup_skipped_steps = int(skipped), int(warmup_skipped)
    if warmup is not None:
        row.warmup = warmup
    row.first_loss = first_loss if first_loss is None or math.isfinite(first_loss) else None
    fill_flops(row, flops, gpu, world_size)


def fill_flops(row: BenchRow, flops: float | None, gpu: bool, world_size: int = 1) -> None:
    if not flops or not row.samples_per_s:
        return
    row.tflops = flops * row.samples_per_s / 1e12
    peak = peak_tflops(row.device_name, row.mode) if gpu else None
    row.mfu = row.tflops / (peak * world_size) if peak else None


def check_final_loss(row: BenchRow, loss: float, cfg: BenchConfig) -> None:
    """A run whose loss is inf/NaN did not train: the row is an error, saying how far it got."""
    row.final_loss = loss
    if not math.isfinite(loss):
        row.status = "error"
        skipped = [f"{row.skipped_steps} of {cfg.steps} timed"] if row.skipped_steps else []
        skipped += [f"{row.warmup_skipped_steps} of {cfg.warmup} warm-up"] if row.warmup_skipped_steps else []
        row.error = (f"loss is {loss} after {cfg.warmup + cfg.steps} steps"
                     + (f" ({' and '.join(skipped)} steps skipped by the loss scaler)" if skipped else ""))


def describe_failure(exc: BaseException) -> str:
    return one_line(exc, 500)


class TrialFailed(Exception):
    """A --batch-size auto trial failed for a reason other than memory: its row says why."""

    def __init__(self, row: BenchRow):
        super().__init__(row.error)
        self.row = row


def search_batch(row: BenchRow, trial: Callable[[int], tuple[bool, int | None]], start: int, cap: int,
                 budget: int | None, say=None) -> int | None:
    """``--batch-size auto`` around a backend's ``trial(b) -> (ran without OOM, peak bytes)``.

    A batch fits when it ran and, with a ``budget``, its measured peak stays within it. Records
    every trial in ``row.search``; sets ``max_batch_size``, or the oom status when nothing fits.
    """
    def fits(b: int) -> bool:
        ran, peak = trial(b)
        ok = ran and (budget is None or (peak or 0) <= budget)
        row.search.append([b, ok, peak])
        if say:
            say("search", b, None)
        return ok

    best = largest_fitting(fits, start, cap)
    if best is None:
        row.status = "oom"
        row.error = ("even batch size 1 does not fit" +
                     (f" in the memory budget of {budget} bytes" if budget else " in device memory"))
        return None
    row.max_batch_size = best
    return best


def run_modes(modes, repeats: int, run_one: Callable[[str], BenchRow], *, steps: int, progress=None, on_row=None,
              fresh: bool = True) -> tuple[list[BenchRow], bool]:
    """Every mode in turn, ``repeats`` times interleaved (:mod:`.repeats`), each run by
    ``run_one(mode)``; the repeats folded into one row per mode with the relative figures. Ctrl-C
    keeps the rows that finished (returns ``interrupted``). ``fresh``: each run is a fresh process
    (the progress says so when a mode starts)."""
    from .repeats import fold, sequence

    runs: dict[str, list[BenchRow]] = {}
    interrupted = False
    try:
        for k, mode in sequence(modes, repeats):
            if progress and fresh:
                progress({"mode": mode, "kind": "start", "repeat": k + 1, "repeats": repeats, "steps": steps})
            row = run_one(mode)
            runs.setdefault(mode, []).append(row)
            if on_row:
                on_row(row)
    except KeyboardInterrupt:
        interrupted = True
    rows = fold(runs, modes, repeats)
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
        got = run_child(spec, replace(request, config=short))
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


def run_child(spec: str, request: MeasureRequest, progress=None) -> BenchRow:
    """Measure ``request`` in a fresh spawned process: the backend at ``spec`` (``"module:Class"``,
    :func:`ampkit.backends.load_backend`) runs its ``bench_measure`` there (:func:`serve_mode`) and
    sends JSON messages back (progress, then the row). A worker that dies yields an error row (an oom
    row when it was SIGKILLed, the out-of-memory killer's signal); one past ``--timeout`` is stopped."""
    mode, timeout = request.mode, request.config.timeout
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=serve_mode, args=(send, spec, request), daemon=True)
    saved = {k: os.environ.get(k) for k in _CHILD_ENV}
    os.environ.update(_CHILD_ENV)
    try:
        with sigint_blocked(), main_not_rerun():  # a script calling ampkit.bench at its top level is not re-run
            proc.start()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    send.close()
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
    with :func:`ampkit.backends.register_backend` works here too), measures the mode."""
    def measure(progress) -> BenchRow:
        from ..backends import load_backend

        return load_backend(spec).bench_measure(request, progress)

    serve_row(conn, request.mode, measure)


def serve_row(conn, mode: str, make_row) -> None:
    """In a bench child: ``make_row(progress)`` -> BenchRow, sent to the parent as JSON, with
    progress messages on the way. Any failure still sends a row."""
    die_with_parent()

    def send(msg: dict) -> None:
        conn.send_bytes(json.dumps(msg).encode())

    try:
        row = make_row(lambda kind, done, total: send({"type": "progress", "kind": kind, "done": done, "total": total}))
        send({"type": "result", "row": row.to_dict()})
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # last resort: the parent still gets a row
        send({"type": "result", "row": BenchRow(mode, status="error", error=describe_failure(exc)).to_dict()})
    finally:
        conn.close()
        run_exit_hooks()  # e.g. torch.compile's worker pool (isolation.at_child_exit)
        os._exit(0)  # skip interpreter teardown (CUDA contexts, threads): the row is sent
