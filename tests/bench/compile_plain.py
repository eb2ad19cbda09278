"""The plain bench backend (``plain_backend``) marking its rows compiled under ``--compile on``:
the driver's ``--compile both`` without any compiler."""

from __future__ import annotations

from plain_backend import PlainBackend


class CompilingPlain(PlainBackend):
    def bench_measure(self, request, progress):
        row = super().bench_measure(request, progress)
        row.compiled = request.config.compile == "on"
        return row
