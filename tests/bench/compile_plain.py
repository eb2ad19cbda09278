"""The plain bench backend (``plain_backend``) marking its rows compiled under ``--compile on``:
the driver's ``--compile both`` without any compiler."""

from __future__ import annotations

from plain_backend import PlainBackend


class CompilingPlain(PlainBackend):
    def bench_open(self, request):
        session = super().bench_open(request)
        session.facts["compiled"] = request.config.compile == "on"
        return session
