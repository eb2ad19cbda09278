"""One mode's run through a backend's :class:`~ampkit.bench.ops.BenchSession`, the same for every
framework: the backend measures, this module decides the blocks and judges.

:class:`SessionRun` opens the session (``bench_open``), runs ``--batch-size auto``'s search where
the backend searches in its child, the warm-up (a compiled run's first step timed apart as
``compile_s``, never among the timed steps), the timed blocks, and turns the measurement into the
row (:mod:`.rows`), with ``--explain``'s size table. Any failure on the way becomes the row's status.

- :func:`measure_mode`: one run in this process (a fresh child, or every rank under a launcher):
  the warm-up, then all timed steps in one block.
- :func:`serve_session`: the child of an interleaved run (:mod:`.interleave`): it opens, warms up,
  then trains one block per round when the parent says, and sends back each block's step times.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time

from ..breakdown import explain_steps
from ..isolation import child_starts, run_exit_hooks
from .compiled import compiled_warmup
from .ops import MeasureRequest
from .report import BenchRow
from .rounds import split_rounds
from .rows import add_size_table, describe_failure, fault, fill_flops, fill_measured, new_row, search_batch


class SessionRun:
    """A mode's session from open to row; ``failed`` once the row holds a failure."""

    def __init__(self, backend, request: MeasureRequest, progress=None):
        self.backend, self.request, self.cfg = backend, request, request.config
        self.say = progress or (lambda *a: None)
        self.row = new_row(request)
        self.session = None
        self.failed = False
        self.compiled = self.row.compiled = self.cfg.compile == "on"  # an unsupported compiled row says so too
        self.warmup = compiled_warmup(self.cfg.warmup, self.compiled)
        self.total = self.warmup + self.cfg.steps
        self.done = 0
        self.step_s: list[float] = []
        self.blocks: list[int] = []
        self.compile_s = None
        self.batch_size = None

    def _fail(self, exc: BaseException) -> bool:
        fault(self.row, exc)
        self.failed = True
        return False

    def _step(self) -> None:
        self.done += 1
        self.say("step", self.done, self.total)

    def open(self) -> bool:
        """Build, search the batch (``--batch-size auto`` in this child), begin the measured run."""
        try:
            self.session = s = self.backend.bench_open(self.request)
            self.row.compiled = bool(s.facts.get("compiled", self.compiled))
            batch = self.cfg.batch_size or s.default_batch
            if batch == "auto":
                batch = search_batch(self.row, s.trial, s.default_batch, self.cfg.search_cap, self.cfg.memory_budget,
                                     self.say)
                if batch is None:
                    self.failed = True
                    return False
            self.batch_size = batch
            s.begin(batch)
            return True
        except Exception as exc:
            return self._fail(exc)

    def warm_up(self) -> bool:
        try:
            t0 = time.perf_counter()
            if self.compiled and self.warmup:  # the compiling step, timed apart (never a timed step)
                self.session.steps(1, False, self._step)
                self.compile_s = time.perf_counter() - t0
            left = self.warmup - self.done
            if left > 0:
                self.session.steps(left, False, self._step)
            return True
        except Exception as exc:
            return self._fail(exc)

    def block(self, n: int) -> list[float] | None:
        """``n`` timed steps (one round's block); None when they failed (the row says why)."""
        try:
            got = self.session.steps(n, True, self._step)
        except Exception as exc:
            self._fail(exc)
            return None
        self.step_s.extend(got)
        self.blocks.append(n)
        return got

    def finish(self, profile: bool = True) -> BenchRow:
        """The row from the timed steps so far (``profile`` False: no ``--explain`` steps, e.g. after Ctrl-C)."""
        if self.failed or self.session is None:
            return self.row
        try:
            steps = explain_steps(self.cfg.steps) if self.cfg.explain and profile else 0
            measured = self.session.finish(steps)
            fill_measured(self.row, self.request, self.batch_size, self.step_s, self.warmup, measured,
                          self.session.facts, compile_s=self.compile_s)
            self.row.steps = len(self.step_s)
            if not self.request.target.accelerator and hasattr(os, "sched_getaffinity"):
                self.row.cpus = sorted(os.sched_getaffinity(0))  # where it timed (ampkit.threads.timing_cpus)
            if len(self.blocks) > 1:
                self.row.round_ms = [round(t * 1e3, 6) for t in split_rounds(self.step_s, self.blocks)]
                self.row.rounds = len(self.blocks)
            if self.request.group is not None and self.row.status == "ok":
                self._reduce()
            if steps and self.row.explain_detail is not None:
                self._size_table()
        except Exception as exc:
            self._fail(exc)
        return self.row

    def _reduce(self) -> None:
        """Under a launcher every rank ends with the global figures: the slowest rank sets the pace,
        memory is the largest rank's."""
        row, world = self.row, self.request.group.world_size
        t, peak, ok = self.session.reduce(row.batch_size / row.samples_per_s, row.peak_memory_bytes or 0,
                                          row.status == "ok", world)
        if ok:
            row.samples_per_s, row.peak_memory_bytes = row.batch_size * world / t, int(peak)
            fill_flops(row, self.request.flops_per_sample, self.request.target.accelerator, world)

    def _size_table(self) -> None:
        """For a row that ``--explain`` profiled in a mode other than fp32 and fp8, the size table its
        explanation cites: the doctor's matmul against fp32's at small, medium and large sizes
        (:func:`ampkit.doctor.sizes.measure_sizes`), timed here, as the backend says (``bench_size_work``)."""
        mode = self.request.mode
        if mode in ("fp32", "fp8"):
            return
        sizes = self.backend.bench_size_work(self.request.target)
        if sizes is None:
            return
        from ..doctor.sizes import CPU_SIZES, GPU_SIZES, measure_sizes

        gpu = self.request.target.accelerator
        try:
            with sizes.scope():
                table = measure_sizes(mode, sizes.work_at, GPU_SIZES if gpu else CPU_SIZES, max_call_s=0.2 if gpu else 0.05)
            add_size_table(self.row, table, sizes.source)
        except Exception as exc:  # the breakdown stands without it
            add_size_table(self.row, {}, f"not measured: {describe_failure(exc)}")

    def close(self) -> None:
        if self.session is not None:
            try:
                self.session.close()
            except Exception:  # the row is what matters
                pass


def measure_mode(backend, request: MeasureRequest, progress) -> BenchRow:
    """One mode in this process, on ``config.threads`` CPU threads (``bench_threads``, :mod:`ampkit.threads`):
    open, warm up, every timed step in one block, the row."""
    with backend.bench_threads(request.target, request.config.threads):
        run = SessionRun(backend, request, progress)
        try:
            if run.open() and run.warm_up():
                run.block(request.config.steps)
            return run.finish()
        finally:
            run.close()


def serve_session(conn, spec: str, request: MeasureRequest) -> None:
    """Entry of an interleaved run's child: the backend at ``spec`` opens the mode and warms it up when
    told, then runs the blocks the parent asks for (``{"cmd": "block", "n": k}`` -> ``{"type":
    "times", "s": [...]}``) until ``{"cmd": "finish"}`` -> ``{"type": "result", "row": {...}}``. A failure
    at any point sends the row at once. Ctrl-C is the parent's to handle (it asks the idle children
    for their rows, then stops them)."""
    child_starts()
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def send(msg: dict) -> None:
        conn.send_bytes(json.dumps(msg).encode())

    run = None
    threads = contextlib.ExitStack()
    try:
        from ..registry import load_backend

        backend = load_backend(spec)
        # on config.threads CPU threads (ampkit.threads), the whole life of the child: the scope is
        # held open until the child ends (a bare ``.__enter__()`` on a temporary restored the count
        # at once, when the context manager was collected, and every interleaved mode timed on the
        # machine's default count while its row said 1)
        threads.enter_context(backend.bench_threads(request.target, request.config.threads))
        run = SessionRun(backend, request,
                         lambda kind, done, total: send({"type": "progress", "kind": kind, "done": done, "total": total}))
        ok = run.open()
        send({"type": "ready"} if ok else {"type": "result", "row": run.row.to_dict()})
        while ok:
            msg = json.loads(conn.recv_bytes())
            if msg["cmd"] == "warmup":
                ok = run.warm_up()
                send({"type": "ready"} if ok else {"type": "result", "row": run.row.to_dict()})
            elif msg["cmd"] == "block":
                got = run.block(int(msg["n"]))
                ok = got is not None
                send({"type": "times", "s": got} if ok else {"type": "result", "row": run.row.to_dict()})
            else:  # finish
                send({"type": "result", "row": run.finish(bool(msg.get("profile", True))).to_dict()})
                ok = False
    except (EOFError, OSError):  # the parent is gone or stopped listening
        pass
    except Exception as exc:  # last resort: the parent still gets a row
        try:
            send({"type": "result", "row": BenchRow(request.mode, status="error", error=describe_failure(exc)).to_dict()})
        except Exception:
            pass
    finally:
        if run is not None:
            run.close()
        threads.close()
        conn.close()
        run_exit_hooks()
        os._exit(0)
