"""Output files: checked before any work starts, written atomically, stdout kept for one document."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import tempfile

from .errors import UsageError

#: what each writer can produce; None: any extension (or none)
PLOT_FORMATS = ("png", "pdf", "svg", "svgz", "eps", "ps", "jpg", "jpeg", "tif", "tiff", "webp")
_FOREIGN = {  # an extension that names another writer's format is a mistake, not a wish
    "JSON": ("csv", "tsv", *PLOT_FORMATS, "html", "htm", "md"),
    "CSV": ("json", *PLOT_FORMATS, "html", "htm", "md"),
}
#: writers whose file must carry one of their extensions (the report's page and its Markdown)
REQUIRED_EXTENSIONS = {"HTML": ("html", "htm"), "Markdown": ("md", "markdown")}

_reserved_fd: int | None = None
_may_reserve = False  # set by the program's entry point; a library caller's (or test's) stdout is left alone


def own_stdout() -> None:
    """Called by ``ampkit``'s entry point: this process's stdout is ampkit's to reserve."""
    global _may_reserve
    _may_reserve = True


def owns_process() -> bool:
    """True in the ``ampkit`` program itself (its entry point called :func:`own_stdout`), never in a
    library caller's process: only there may a command make settings it cannot undo (TensorFlow's
    thread pools, made once per process)."""
    return _may_reserve


def _ext(path: str) -> str:
    return os.path.splitext(path)[1].lower().lstrip(".")


def _example(what: str) -> str:
    return {"plot": "out.png", "HTML": "report.html", "Markdown": "report.md"}.get(what, f"out.{what.lower()}")


def check_output(path: str | None, what: str, flag: str, *, stdout_ok: bool = True, inputs=()) -> None:
    """Refuse an output path that cannot be written, before any work (``what``: JSON, CSV, plot, HTML,
    Markdown). ``inputs``: files the run reads, which its output must not overwrite."""
    if path is None:
        return
    path = str(path)
    if not path.strip():
        raise UsageError(f"{flag} is empty; give a file path" + (" or '-' for stdout" if stdout_ok else ""))
    if path == "-":
        if not stdout_ok:
            raise UsageError(f"{flag} cannot go to stdout ('-'): {flag} needs a file name, e.g. {flag} {_example(what)}")
        return
    ext = _ext(path)
    if what == "plot" and ext and ext not in PLOT_FORMATS:
        raise UsageError(f"{flag} {path!r}: cannot write a plot as .{ext}; use one of "
                         f"{', '.join('.' + f for f in PLOT_FORMATS[:5])} (e.g. {flag} out.png)")
    if ext in _FOREIGN.get(what, ()):
        raise UsageError(f"{flag} {path!r} writes {what}, but .{ext} names another format; "
                         f"use a .{what.lower()} name")
    if path.endswith(os.sep) or os.path.isdir(path):
        raise UsageError(f"{flag} {path!r} is a folder; give a file name inside it, "
                         f"e.g. {os.path.join(path, _example(what).replace('out.', 'result.'))}")
    required = REQUIRED_EXTENSIONS.get(what)
    if required and ext not in required:
        raise UsageError(f"{flag} {path!r} should end in {' or '.join('.' + e for e in required)} "
                         f"(e.g. {_example(what)})")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"{flag} {path!r}: folder {parent!r} does not exist; create it first (mkdir -p)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path!r}: folder {parent!r} is not writable")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise UsageError(f"{flag} {path!r} exists and is not writable")
    real = os.path.realpath(path)
    if any(os.path.realpath(p) == real for p in inputs):
        raise UsageError(f"{flag} {path!r} is one of the input documents; write to another file")


def check_output_dir(path: str | None, flag: str, what: str = "files") -> None:
    """Refuse an output folder (made when missing) that cannot be written: a file, a missing parent,
    a read-only folder."""
    if path is None:
        return
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"{flag} {path!r} is a file; give a folder for the {what}")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(path) and not os.path.isdir(parent):
        raise UsageError(f"{flag} {path!r}: folder {parent!r} does not exist; create it first (mkdir -p)")
    target = path if os.path.isdir(path) else parent
    if not os.access(target, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path!r}: folder {target!r} is not writable")


def check_distinct(*pairs: tuple[str | None, str]) -> None:
    """Two outputs naming the same file (or both stdout) would overwrite each other."""
    seen: dict[str, str] = {}
    for path, flag in pairs:
        if not path:
            continue
        key = "-" if path == "-" else os.path.realpath(path)
        if key in seen:
            where = "stdout" if key == "-" else repr(path)
            raise UsageError(f"{seen[key]} and {flag} both write to {where}; give each its own")
        seen[key] = flag


@contextlib.contextmanager
def atomic_path(path: str):
    """Yield a unique temporary path beside ``path``; on success it replaces ``path``, on failure
    it is removed. For writers that want a file name (matplotlib's savefig)."""
    if os.path.islink(path):  # write through a link to its target (os.replace would swap the link itself)
        path = os.path.realpath(path)
    if os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):
        yield path  # a device or a FIFO (/dev/null, /dev/full, a pipe): written into, never replaced by a file
        return
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a written output is an ordinary file
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_write(path: str, newline: str | None = None):
    """Open a text file that appears at ``path`` only once it is complete."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline=newline) as fh:
        yield fh


def write_text(path: str, text: str) -> None:
    """``text`` to ``path``, atomically (:func:`atomic_write`), with ``\\n`` line ends everywhere."""
    with atomic_write(path, newline="\n") as fh:
        fh.write(text)


def reserve_stdout() -> None:
    """Keep stdout for the one JSON document: fd 1 (and what children inherit) goes to stderr."""
    global _reserved_fd
    if _reserved_fd is not None or not _may_reserve:
        return
    if sys.stdout is None:  # started with stdout closed: nothing to keep (writing it fails, and is salvaged)
        return
    sys.stdout.flush()
    try:
        _reserved_fd = os.dup(1)
    except OSError:
        return
    os.dup2(2, 1)


def write_stdout(text: str) -> None:
    """Write the document to the real stdout (the reserved copy when :func:`reserve_stdout` ran)."""
    if _reserved_fd is None:
        if sys.stdout is None:  # a closed stdout: an OS-level failure like a full one (outputs.salvage)
            raise OSError(errno.EBADF, "stdout is closed")
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    data = text.encode("utf-8")
    while data:
        data = data[os.write(_reserved_fd, data):]


def fallback_path(path: str, default_name: str) -> list[str]:
    """Where an output that could not be written at ``path`` goes instead, in order of preference:
    the same file name in the working folder (unless that is where it failed), then in the
    temporary folder. A name already taken there gets the process id added."""
    name = default_name if path in ("-", "") else os.path.basename(path) or default_name
    failed_dir = None if path == "-" else os.path.dirname(os.path.abspath(path))
    out = []
    for folder in (os.getcwd(), tempfile.gettempdir()):
        if os.path.abspath(folder) == failed_dir:
            continue
        candidate = os.path.join(folder, name)
        if os.path.exists(candidate):
            stem, ext = os.path.splitext(name)
            candidate = os.path.join(folder, f"{stem}.{os.getpid()}{ext}")
        out.append(candidate)
    return out


def salvage(write, path: str, flag: str, default_name: str) -> str | None:
    """Call ``write(path)``; when the OS refuses (full disk, a folder removed or replaced mid-run,
    a closed stdout), write the same output to a :func:`fallback_path` instead and say both in one
    line on stderr. Returns None when ``path`` was written, else the line said (a failure to report)."""
    try:
        write(path)
        return None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
    where = "stdout" if path == "-" else repr(path)
    for alt in fallback_path(path, default_name):
        try:
            write(alt)
        except OSError:
            continue
        line = f"ampkit: error: could not write {flag} to {where} ({reason}); wrote it to {alt} instead"
        break
    else:
        line = f"ampkit: error: could not write {flag} to {where} ({reason}), nor to the working or temporary folder"
    print(line, file=sys.stderr)
    return line


def plot_format(path: str) -> str:
    """matplotlib's format for ``path`` (a temporary name has no telling extension): png by default."""
    ext = _ext(path)
    return ext if ext in PLOT_FORMATS else "png"
