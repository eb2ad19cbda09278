"""Running a user's code where its failures cannot take ampkit down."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import re
import signal
import sys
import time
import traceback

from .errors import UsageError
from .lean_imports import skip_unused_imports

#: the default --timeout: long enough for a big model's probe or one mode's run on a slow machine
DEFAULT_TIMEOUT_S = 1800.0

#: the signal a parent sends to ask a child to stop early and return what finished
STOP_SIGNAL = getattr(signal, "SIGUSR1", None)

_stop_requested = False


def stop_requested() -> bool:
    """In a child run by :func:`run_isolated`: True once the parent asked it to stop early. Loops
    that can return a partial result check it between units of work (an audited step)."""
    return _stop_requested


def _on_stop_request(signum, frame) -> None:
    global _stop_requested
    _stop_requested = True


class TimedOut(UsageError):
    """A ``keep_partial`` run that had started (:func:`tell_parent`) went past ``timeout``: the child
    was asked to stop as on Ctrl-C, and ``result`` is what it returned (None when it did not answer
    within the grace period). Still a
    :class:`UsageError` (one line, exit 2) for a caller that does not keep partial results."""

    def __init__(self, message: str, result=None, notes=()):
        super().__init__(message)
        self.result = result
        self.notes = list(notes)  # what the child told (tell_parent) before it stopped answering


class PartialResult(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped a ``keep_partial`` run, and the child returned what finished.

    ``result`` is the child's return value; ``cause`` the KeyboardInterrupt (or
    :class:`ampkit.signals.Terminated`) that stopped the parent."""

    def __init__(self, result, cause: BaseException):
        super().__init__("stopped early; the finished part is kept")
        self.result = result
        self.cause = cause


def describe_exit(code: int | None) -> str:
    """'was killed by SIGSEGV (a crash in native code)', 'exited with code 3', ..."""
    if code is None:
        return "did not exit"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        why = {"SIGSEGV": " (a crash in native code)", "SIGKILL": " (most likely the out-of-memory killer)",
               "SIGABRT": " (an abort in native code)", "SIGBUS": " (a crash in native code)"}.get(name, "")
        return f"was killed by {name}{why}"
    return f"exited with code {code}"


def die_with_parent() -> None:
    """In a child: be killed when ampkit dies, even by SIGKILL (Linux's PR_SET_PDEATHSIG; elsewhere
    a no-op). Without it an OOM-killed ampkit would leave its children running."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort: the parent also terminates its children itself
        pass


def child_starts() -> None:
    """What every child ampkit starts does first: :func:`die_with_parent`, and as a process of
    ampkit's own, import TensorFlow without what training never uses (:mod:`ampkit.lean_imports`)."""
    die_with_parent()
    skip_unused_imports()


@contextlib.contextmanager
def sigint_blocked():
    """Start children inside this: they begin life with SIGINT blocked (a blocked mask survives
    fork and exec), so a terminal's Ctrl-C, which reaches the whole process group, never raises
    KeyboardInterrupt in a child still importing (a traceback on the user's screen); the parent
    handles it and stops its children. A Ctrl-C that arrives meanwhile is delivered to the parent
    when the block ends, not lost."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def main_not_rerun():
    """Start spawned children inside this: they do not re-run the caller's script. A spawned child
    imports the parent's ``__main__`` by path before it unpickles its target -- a library call at a
    script's top level, without ``if __name__ == "__main__":``, would run the whole script again in
    the child (and fail there starting its own children). The children ampkit isolates run ampkit's
    functions on picklable specs, never the script's objects, so they skip it: a ``__main__`` that
    names itself ``__main__`` is not re-imported (multiprocessing.spawn._fixup_main_from_name)."""
    main = sys.modules.get("__main__")
    if main is None or getattr(main, "__spec__", None) is not None or not getattr(main, "__file__", None):
        yield  # `python -m ...`, a notebook, an interactive shell: nothing to re-run
        return
    import importlib.machinery

    main.__spec__ = importlib.machinery.ModuleSpec("__main__", None)
    try:
        yield
    finally:
        main.__spec__ = None


#: called in a child before it ends (see :func:`at_child_exit`)
_exit_hooks: list = []


def at_child_exit(hook) -> None:
    """Run ``hook()`` when this child process ends (it ends with ``os._exit``, which skips the
    interpreter's teardown): e.g. torch.compile's worker pool, whose semaphores multiprocessing's
    resource tracker would otherwise report as leaked after ampkit's last line."""
    if hook not in _exit_hooks:
        _exit_hooks.append(hook)


def run_exit_hooks() -> None:
    """Run the :func:`at_child_exit` hooks (a child calls it just before ``os._exit``)."""
    for hook in _exit_hooks:
        with contextlib.suppress(Exception):
            hook()
    if _exit_hooks:  # the finalizers os._exit skips: a pool's queue unregisters its semaphores there
        import multiprocessing.util

        with contextlib.suppress(Exception):
            multiprocessing.util._run_finalizers(0)


#: in a child of run_isolated: the pipe to the parent (for :func:`tell_parent`)
_parent_conn = None


def tell_parent(note: str) -> None:
    """In a child run by :func:`run_isolated`: tell the parent how far the run got (e.g. "started":
    the user's factory returned and measuring began), so that a run past ``timeout`` that cannot
    answer is told apart from one that never got going. Elsewhere a no-op."""
    if _parent_conn is not None:
        with contextlib.suppress(Exception):
            _parent_conn.send(("note", note))


def _child(conn, target, args, term_is_request: bool = False) -> None:
    global _parent_conn
    _parent_conn = conn
    child_starts()
    os.dup2(2, 1)  # user prints go to stderr: stdout belongs to the JSON document
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the parent's to handle
    if STOP_SIGNAL is not None:
        signal.signal(STOP_SIGNAL, _on_stop_request)  # "stop early": only a flag, checked by the loops
    if not term_is_request:  # a forked child inherits its parent's handler (SIGTERM -> stop the run): terminate
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    else:
        # a SIGTERM sent to the whole process group (timeout(1), a batch system's stop) reaches this
        # child too: like the parent's request it only asks for an early stop, so that what finished
        # can still come back; the parent ends this process with SIGKILL when it must
        signal.signal(signal.SIGTERM, _on_stop_request)
    try:
        msg = ("ok", target(*args))
    except UsageError as exc:
        msg = ("usage", str(exc))
    except SystemExit as exc:
        msg = ("error", f"it called sys.exit({exc.code!r})")
    except KeyboardInterrupt:
        msg = ("error", "it raised KeyboardInterrupt")
    except BaseException as exc:  # noqa: BLE001 - any failure of user code is reported, not raised
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip().splitlines()  # no terminal colour codes
        msg = ("error", f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")[:500])
        if os.environ.get("AMPKIT_DEBUG"):
            traceback.print_exc()
    try:
        conn.send(msg)
    except Exception as exc:  # an unpicklable result is ampkit's bug: say so in one line
        conn.send(("error", f"cannot return the result: {type(exc).__name__}: {exc}"))
    finally:
        conn.close()
        run_exit_hooks()  # what os._exit would leave behind (a worker pool's semaphores)
        for stream in (sys.stdout, sys.stderr):  # None where the program was started with it closed
            if stream is not None:
                stream.flush()
        os._exit(0)  # skip interpreter teardown: the result is sent


#: the environment variable that carries, to the processes ampkit starts, the lines already said
_SAID_ENV = "AMPKIT_SAID_ONCE"
#: the prefix of the note a child sends its parent (:func:`tell_parent`) after saying one
_SAID_PREFIX = "said-once:"


def say_once(key: str, line: str) -> None:
    """Write ``line`` to stderr once for the whole run: not again in this process, in the processes
    it starts later (an environment variable they inherit), nor -- for a child of
    :func:`run_isolated` -- in its parent and the processes the parent starts next."""
    if key in os.environ.get(_SAID_ENV, "").split(os.pathsep):
        return
    print(line, file=sys.stderr, flush=True)
    _mark_said(key)
    tell_parent(_SAID_PREFIX + key)


def _mark_said(key: str) -> None:
    said = [k for k in os.environ.get(_SAID_ENV, "").split(os.pathsep) if k]
    if key not in said:
        os.environ[_SAID_ENV] = os.pathsep.join([*said, key])


def _said_in_child(note) -> bool:
    """True for a child's :func:`say_once` note (recorded here, not a note of progress)."""
    if isinstance(note, str) and note.startswith(_SAID_PREFIX):
        _mark_said(note[len(_SAID_PREFIX):])
        return True
    return False


def run_isolated(target, *args, what: str, timeout: float | None = DEFAULT_TIMEOUT_S,
                 keep_partial: float | None = None, start: str = "spawn"):
    """``target(*args)`` in a fresh process; its failures -> ``UsageError(f"{what}: ...")``.

    ``target`` must be a module-level function (spawn pickles it by name) and its arguments and
    result picklable. ``what`` names the run for the message, e.g. "probing --model m:f".

    ``keep_partial``: on Ctrl-C or SIGTERM, ask the child to stop early and wait up to this many
    seconds for what finished; it comes back as :class:`PartialResult`. Without it (or without an
    answer in time, or on a second Ctrl-C) the child is stopped and the interrupt propagates.

    ``start``: ``"spawn"`` (a fresh interpreter), or ``"fork"`` where the caller knows forking this
    process is safe (one thread; see :meth:`ampkit.bench.ops.BenchOps.bench_probe_fork`).
    """
    ctx = multiprocessing.get_context(start)
    recv, send = ctx.Pipe(duplex=False)
    hard = bool(keep_partial)  # the child takes SIGTERM as a stop request: end it with SIGKILL
    proc = ctx.Process(target=_child, args=(send, target, args, hard), daemon=True)
    with sigint_blocked(), main_not_rerun():
        proc.start()
    send.close()
    deadline = None if timeout is None else time.monotonic() + timeout
    msg, notes = None, []
    try:
        while True:
            if recv.poll(0.1):
                try:
                    msg = recv.recv()
                except EOFError:
                    msg = None
                if msg is not None and msg[0] == "note":  # how far it got (tell_parent): keep waiting
                    if not _said_in_child(msg[1]):
                        notes.append(msg[1])
                    msg = None
                    continue
                break
            if not proc.is_alive() and not recv.poll(0):
                break
            if deadline is not None and time.monotonic() > deadline:
                # a run that started measuring (tell_parent) and can end early is asked to, as on Ctrl-C:
                # what finished is kept (bench keeps a timed-out mode as an error row; the audit its steps)
                partial = _ask_to_stop(proc, recv, min(keep_partial, max(5.0, timeout / 2)),
                                       why=f"--timeout {timeout:g} s reached") if hard and notes else None
                stop(proc, hard=hard)
                if hard and (partial is not None or notes):
                    kept = "what finished is kept" if partial is not None else "it did not answer, nothing is kept"
                    raise TimedOut(f"{what}: stopped at --timeout {timeout:g} s; {kept}", partial, notes)
                # it never got going (a factory that hangs): a usage line
                raise UsageError(f"{what}: no result after {timeout:g} s (--timeout); the process was stopped")
    except KeyboardInterrupt as exc:
        partial = _ask_to_stop(proc, recv, keep_partial) if hard else None
        if partial is not None:
            proc.join(5)  # it exits by itself once its result is sent
        stop(proc, hard=hard)
        if partial is not None:
            raise PartialResult(partial, exc) from None
        raise
    except BaseException:
        stop(proc, hard=hard)
        raise
    proc.join(10)
    if proc.is_alive():
        stop(proc, hard=hard)
    if msg is None:
        raise UsageError(f"{what}: the process {describe_exit(proc.exitcode)} without a result")
    kind, value = msg
    if kind == "ok":
        return value
    if kind == "usage":
        raise UsageError(value)
    raise UsageError(f"{what} failed: {value}")


def _ask_to_stop(proc, recv, grace: float, why: str = ""):
    """Send the stop request and wait up to ``grace`` s for the child's result; None without one."""
    if STOP_SIGNAL is None or (not proc.is_alive() and not recv.poll(0)):
        return None
    try:
        if proc.is_alive():
            os.kill(proc.pid, STOP_SIGNAL)
        print(f"ampkit: {why + ': ' if why else ''}stopping after the current step (up to {grace:g} s; "
              "Ctrl-C again to stop now)", file=sys.stderr)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if recv.poll(0.1):
                kind, value = recv.recv()
                if kind == "note":  # how far it got: not its answer
                    continue
                return value if kind == "ok" else None
            if not proc.is_alive() and not recv.poll(0):
                return None
    except KeyboardInterrupt:  # a second Ctrl-C: stop now
        return None
    except (EOFError, OSError):
        return None
    return None


def stop(proc, grace: float = 5.0, hard: bool = False) -> None:
    """Terminate a child process, then kill it if it does not go within ``grace`` seconds.

    ``hard``: SIGKILL at once (a child that takes SIGTERM as a request to stop early). Processes the
    child started (user code that spawned a ``sleep``, a DataLoader's workers) are killed with it:
    they are collected while it lives, since once it is gone they belong to init."""
    kids = _descendants(proc.pid) if proc.is_alive() else []
    if proc.is_alive() and not hard:
        proc.terminate()
        proc.join(grace)
    if proc.is_alive():
        proc.kill()
        proc.join(grace)
    for kid in kids:
        with contextlib.suppress(Exception):
            kid.kill()


def _descendants(pid: int) -> list:
    """The processes below ``pid`` (psutil), or [] where they cannot be listed."""
    try:
        import psutil

        return psutil.Process(pid).children(recursive=True)
    except Exception:
        return []
