"""Output files: checked before any work starts, written atomically, stdout kept for one document.

* :func:`check_output` refuses (exit 2, one line) a path that the run could not write at its end:
  an empty name, a folder, a missing or read-only folder, an extension the writer cannot produce,
  ``-`` where stdout makes no sense — so a long run never fails at the last moment.
* :func:`atomic_path` / :func:`atomic_write` write to a unique temporary name in the target's own
  folder and rename it over the target only when complete (``os.replace`` is atomic within one
  file system): a reader never sees half a file, an interrupted write leaves nothing behind.
* :func:`reserve_stdout` moves file descriptor 1 to stderr for the rest of the run (children
  inherit it), keeping a private copy for the JSON document: whatever user code prints — in this
  process or in any child — cannot corrupt ``--json -``.
"""

from __future__ import annotations

import contextlib
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

_reserved_fd: int | None = None
_may_reserve = False  # set by the program's entry point; a library caller's (or test's) stdout is left alone


def own_stdout() -> None:
    """Called by ``ampkit``'s entry point: this process's stdout is ampkit's to reserve."""
    global _may_reserve
    _may_reserve = True


def _ext(path: str) -> str:
    return os.path.splitext(path)[1].lower().lstrip(".")


def check_output(path: str | None, what: str, flag: str, *, stdout_ok: bool = True) -> None:
    """Refuse an output path that cannot be written, before any work (``what``: JSON, CSV, plot)."""
    if path is None:
        return
    if not str(path).strip():
        raise UsageError(f"{flag} is empty; give a file path" + (" or '-' for stdout" if stdout_ok else ""))
    if path == "-":
        if not stdout_ok:
            raise UsageError(f"{flag} cannot go to stdout ('-'); give a file path, e.g. {flag} out.png")
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
                         f"e.g. {os.path.join(path, 'result.' + ('png' if what == 'plot' else what.lower()))}")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"{flag} {path!r}: folder {parent!r} does not exist; create it first (mkdir -p)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path!r}: folder {parent!r} is not writable")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise UsageError(f"{flag} {path!r} exists and is not writable")


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


def reserve_stdout() -> None:
    """Keep stdout for the one JSON document: fd 1 (and what children inherit) goes to stderr."""
    global _reserved_fd
    if _reserved_fd is not None or not _may_reserve:
        return
    sys.stdout.flush()
    _reserved_fd = os.dup(1)
    os.dup2(2, 1)


def write_stdout(text: str) -> None:
    """Write the document to the real stdout (the reserved copy when :func:`reserve_stdout` ran)."""
    if _reserved_fd is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    data = text.encode("utf-8")
    while data:
        data = data[os.write(_reserved_fd, data):]


def plot_format(path: str) -> str:
    """matplotlib's format for ``path`` (a temporary name has no telling extension): png by default."""
    ext = _ext(path)
    return ext if ext in PLOT_FORMATS else "png"
