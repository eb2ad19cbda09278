"""Bench's interleaved run: a live process per mode, timed in alternating rounds (:mod:`.rounds`).

Each mode keeps its own spawned child for the whole run (so memory peaks never leak between modes;
each child measures its own), all started at once: they build their models side by side (untimed),
then warm up in turn, then run one block of steps per round in :func:`.rounds.round_order` while the
others wait on their pipe, then send their rows. The parent holds every block's step times as they
come, so a mode's failure (out of memory, a NaN loss, an unsupported mode, a crash, ``--timeout``)
ends only that mode's child: its row says why and the rounds go on without it.

Ctrl-C (or SIGTERM) keeps what finished: every idle child that completed a round is asked for its row
(no ``--explain`` profile), the one interrupted in its block is stopped; every child is stopped at the end.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from ..isolation import describe_exit, stop
from .ops import MeasureRequest
from .report import BenchRow
from .rounds import round_order
from .runner import spawn
from .session import serve_session

#: seconds an idle child has to send its row after Ctrl-C
_FINISH_AFTER_STOP_S = 30.0


class _Child:
    """One mode's live child and what the parent knows of it."""

    def __init__(self, request: MeasureRequest, spec: str, cpus: frozenset | None = None):
        self.mode, self.timeout = request.mode, request.config.timeout
        self.proc, self.conn = spawn(serve_session, (spec, request), duplex=True, cpus=cpus)
        self.row: BenchRow | None = None  # set once the child sent its row (or died, or ran past --timeout)
        self.busy_s = 0.0                 # time spent answering: --timeout is per mode
        self.rounds = 0

    def ask(self, msg: dict | None, progress, limit: float | None = None) -> dict | None:
        """Send ``msg`` (None: only wait) and wait for the reply that is not progress; None when the
        child sent its row instead (or died, or ran out of time: its row says so)."""
        if msg is not None:
            self.conn.send_bytes(json.dumps(msg).encode())
        t0 = time.monotonic()
        budget = None if self.timeout is None else max(0.0, self.timeout - self.busy_s)
        if limit is not None:
            budget = limit if budget is None else min(budget, limit)
        try:
            while True:
                if self.conn.poll(0.1):
                    try:
                        reply = json.loads(self.conn.recv_bytes())
                    except (EOFError, OSError):
                        self._died()
                        return None
                    if reply["type"] == "progress":
                        if progress:
                            progress({"mode": self.mode, **{k: v for k, v in reply.items() if k != "type"}})
                        continue
                    if reply["type"] == "result":
                        self.row = BenchRow.from_dict(reply["row"])
                        return None
                    return reply
                if not self.proc.is_alive() and not self.conn.poll(0):
                    self._died()
                    return None
                if budget is not None and time.monotonic() - t0 > budget:
                    stop(self.proc)
                    self.row = BenchRow(self.mode, status="error", error=f"no result after {self.timeout:g} s "
                                                                         "(--timeout); the worker was stopped")
                    return None
        finally:
            self.busy_s += time.monotonic() - t0

    def _died(self) -> None:
        self.proc.join(5)
        code = self.proc.exitcode
        killed = code is not None and code < 0 and -code == 9
        self.row = BenchRow(self.mode, status="oom" if killed else "error",
                            error=("the worker was killed (SIGKILL), most likely by the out-of-memory killer"
                                   if killed else f"the worker process {describe_exit(code)} without a result"))


def run_interleaved(spec: str, requests: list[MeasureRequest], blocks: list[int], *, progress=None,
                    on_row: Callable[[BenchRow], None] | None = None, cpus: frozenset | None = None,
                    process_set: dict | None = None, last: bool = True) -> tuple[dict[str, BenchRow], bool]:
    """Every request's mode in its own live child, timed in the rounds ``blocks`` plans (steps per
    round); returns each mode's row (its rounds in ``round_ms``) and whether Ctrl-C cut it short.
    ``cpus``: where every child runs (:func:`.runner.child_cpus`, chosen once by the caller for every
    set and repeat; None: where the scheduler puts them). ``process_set``: which set of processes this run is (``{"set": 1, "sets":
    2}``), told in each mode's start message; ``on_row`` is called for its rows when it is the ``last``
    set of its repeat, when Ctrl-C cut it short (the rows kept so far are final), and for a mode
    that failed (a later set does not run it again)."""
    modes = [r.mode for r in requests]
    children: dict[str, _Child] = {}
    asking: list[_Child] = []  # the child a reply is awaited from (busy when Ctrl-C lands)
    interrupted = False

    def ask(c: _Child, msg: dict | None) -> dict | None:
        asking[:] = [c]
        try:
            return c.ask(msg, progress)
        finally:
            asking.clear()

    def alive() -> list[_Child]:
        return [c for c in children.values() if c.row is None]

    try:
        for req in requests:
            if progress:
                progress({"mode": req.mode, "kind": "start", "steps": req.config.steps, "interleaved": len(requests) > 1,
                          **(process_set or {})})
            children[req.mode] = _Child(req, spec, cpus)  # every mode on the same CPUs (ampkit.threads)
        for c in alive():  # built side by side, each in its own process
            ask(c, None)
        for c in alive():  # the warm-up, in turn
            ask(c, {"cmd": "warmup"})
        for r, n in enumerate(blocks):
            for mode in round_order(modes, r):
                c = children[mode]
                if c.row is None and ask(c, {"cmd": "block", "n": n}) is not None:
                    c.rounds += 1
        for c in alive():
            ask(c, {"cmd": "finish"})
    except KeyboardInterrupt:
        interrupted = True
        busy = set(asking)
        for c in alive():
            if c in busy or c.rounds == 0:
                continue
            try:
                c.ask({"cmd": "finish", "profile": False}, None, limit=_FINISH_AFTER_STOP_S)
            except (KeyboardInterrupt, OSError):  # a second Ctrl-C: stop at once
                break
    finally:
        for c in children.values():
            stop(c.proc)
    rows = {}
    for mode in modes:
        c = children.get(mode)
        if c is None or c.row is None:  # never started, or stopped by the interrupt before its row
            continue
        rows[mode] = c.row
        if on_row and (last or interrupted or c.row.status != "ok"):  # a failed mode's row is final
            on_row(c.row)
    return rows, interrupted
