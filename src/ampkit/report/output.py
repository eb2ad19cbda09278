"""Output paths for the report: checked before any work, written atomically."""

from __future__ import annotations

import os
import tempfile

from ..errors import UsageError

EXTENSIONS = {"HTML": (".html", ".htm"), "Markdown": (".md", ".markdown")}


def check_output(path: str | None, what: str, inputs: list[str] = ()) -> None:
    """Fail early (exit 2) on a path that cannot take the output: wrong extension, a directory,
    a missing or read-only folder, or one of the input documents."""
    if path is None or path == "-":
        return
    flag = f"--{what.lower()}"
    exts = EXTENSIONS[what]
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path!r} is a directory; give a file name such as {os.path.join(path, 'report' + exts[0])!r}")
    if not path.lower().endswith(exts):
        raise UsageError(f"{flag} {path!r} should end in {' or '.join(exts)} (e.g. report{exts[0]})")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"{flag} {path!r}: folder {parent!r} does not exist; create it first")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"{flag} {path!r}: folder {parent!r} is not writable")
    real = os.path.realpath(path)
    if any(os.path.realpath(p) == real for p in inputs):
        raise UsageError(f"{flag} {path!r} is one of the input documents; write the report to another file")


def check_plots_dir(path: str | None) -> None:
    if path is None:
        return
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"--plots {path!r} is a file; give a folder for the PNG charts")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(path) and not os.path.isdir(parent):
        raise UsageError(f"--plots {path!r}: folder {parent!r} does not exist; create it first")
    target = path if os.path.isdir(path) else parent
    if not os.access(target, os.W_OK):
        raise UsageError(f"--plots {path!r}: folder {target!r} is not writable")


def write_atomic(path: str, text: str) -> None:
    """Write to a unique temporary file in the target folder, then rename it over ``path``:
    a reader never sees half a report, and an interrupted write leaves the old file intact."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it 0600; a report is meant to be shared
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
