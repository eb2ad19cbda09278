"""Errors that the command line turns into exit codes."""

from __future__ import annotations


class UsageError(ValueError):
    """Bad usage or bad input: the CLI prints ``ampkit: error: <message>`` and exits 2.

    It subclasses ValueError so that library callers can catch it the usual way.
    """


class ModeUnavailableError(RuntimeError):
    """A precision mode that this device cannot run (tf32 on a CPU, bf16 on a pre-Ampere GPU...)."""


class AutocastDisabledError(RuntimeError):
    """torch.autocast switched itself off (it only warns): never let that pass silently."""


def one_line(exc: BaseException, limit: int = 500) -> str:
    """``TypeName: first line of the message``, at most ``limit`` characters: how a report row or a
    self-test says what broke."""
    return f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:limit]
