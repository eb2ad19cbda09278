"""The plain bench backend (``plain_backend``) writing, for every block of steps it trains, one line
``mode timed n`` to the file ``$AMPKIT_TEST_ORDER`` (each child appends): the order the modes'
processes ran in, as the parent scheduled them. bf16's steps fail from the step named by
``$AMPKIT_TEST_FAIL_AT`` (a NaN loss is not needed: any exception is the mode's own failure). With
``$AMPKIT_TEST_PIDS`` set, each mode's process appends ``mode pid`` to that file when it opens."""

from __future__ import annotations

import os

from plain_backend import PlainBackend, PlainSession


class OrderSession(PlainSession):
    def __init__(self, request):
        super().__init__(request)
        self.mode, self.done = request.mode, 0

    def steps(self, n, timed, on_step=None):
        fail_at = int(os.environ.get("AMPKIT_TEST_FAIL_AT", "0"))
        if self.mode == "bf16" and fail_at and self.done + n >= fail_at:
            raise RuntimeError(f"planted failure at step {fail_at}")
        self.done += n
        with open(os.environ["AMPKIT_TEST_ORDER"], "a") as f:
            f.write(f"{self.mode} {'timed' if timed else 'warmup'} {n}\n")
        return super().steps(n, timed, on_step)


class OrderBackend(PlainBackend):
    def bench_open(self, request):
        super().bench_open(request)  # the support check
        if os.environ.get("AMPKIT_TEST_PIDS"):  # which process timed which mode
            with open(os.environ["AMPKIT_TEST_PIDS"], "a") as f:
                f.write(f"{request.mode} {os.getpid()}\n")
        return OrderSession(request)
