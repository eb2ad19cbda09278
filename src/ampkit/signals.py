"""SIGTERM behaves like Ctrl-C: the run stops, keeps what finished, and exits non-zero."""

from __future__ import annotations

import signal

_received: int | None = None


class Terminated(KeyboardInterrupt):
    """Raised in the main thread when SIGTERM arrives."""


def _on_sigterm(signum, frame):
    global _received
    if _received == signal.SIGTERM:  # a second SIGTERM while stopping: do not interrupt the cleanup
        return
    _received = signal.SIGTERM
    raise Terminated()


_sigint_seen = False
_installed = False


def _on_sigint(signum, frame):
    global _sigint_seen
    _sigint_seen = True
    raise KeyboardInterrupt


def install() -> None:
    """Route SIGTERM to :class:`Terminated` and note a SIGINT before raising KeyboardInterrupt as
    Python does (main thread only; call once, at the CLI's start)."""
    global _installed
    signal.signal(signal.SIGTERM, _on_sigterm)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)
        _installed = True


def interrupted_by_signal() -> bool:
    """Whether a KeyboardInterrupt now in flight came from a signal (Ctrl-C, SIGTERM). Outside the
    CLI (no :func:`install`) it cannot be told: True, a KeyboardInterrupt is taken as the user's."""
    return not _installed or _sigint_seen or _received is not None


def ignore_further() -> None:
    """While writing the finished work, a repeated SIGTERM or Ctrl-C must not cut the write short."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def exit_code(exc: BaseException | None = None) -> int:
    """130 after Ctrl-C, 143 after SIGTERM."""
    if isinstance(exc, Terminated) or _received == signal.SIGTERM:
        return 128 + signal.SIGTERM
    return 128 + signal.SIGINT


def describe() -> str:
    return "terminated (SIGTERM)" if _received == signal.SIGTERM else "interrupted"
