"""Progress of a long library call in a notebook: one display in the cell that updates in place."""

from __future__ import annotations

import html
import sys
import time

#: refresh at most this often (seconds); a mode's start and end always refresh
MIN_INTERVAL_S = 0.25


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (JupyterLab, Notebook, VS Code, nbclient)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:  # noqa: BLE001 -- an odd IPython: no notebook display
        return False
    return shell is not None and getattr(shell, "kernel", None) is not None


class _Snapshot:
    """What the display shows: HTML for a notebook, one text line for a console front end."""

    def __init__(self, html_text: str, text: str):
        self.html_text, self.text = html_text, text

    def _repr_html_(self) -> str:
        return self.html_text

    def __repr__(self) -> str:
        return self.text


class NotebookProgress:
    """One updating display for one library call; ``bench``/``parity``/``doctor`` take that
    command's progress messages, ``row`` a finished bench row, ``close`` shows the end state."""

    def __init__(self, title: str, clock=time.monotonic):
        self.title, self.clock = title, clock
        self.lines: dict[str, dict] = {}
        self.start = clock()
        self.last = None
        self.handle = None
        self.closed = False

    # ------------------------------------------------------------------ the commands' messages
    def bench(self, msg: dict) -> None:
        mode, kind = str(msg.get("mode")), msg.get("kind")
        if kind == "start":
            repeat = f" (repeat {msg['repeat']}/{msg['repeats']})" if (msg.get("repeats") or 1) > 1 else ""
            if (msg.get("sets") or 1) > 1:  # bench's rounds split over sets of processes (ampkit.bench.rounds)
                repeat += f" (process set {msg['set']}/{msg['sets']})"
            self.set(mode, f"starting{repeat}", 0, msg.get("steps"), force=True)
        elif kind == "search":
            self.set(mode, f"trying batch {msg.get('done')}", None, None)
        else:
            self.set(mode, str(kind or "training"), msg.get("done"), msg.get("total"))

    def row(self, row) -> None:
        line = self.lines.get(row.mode, {})
        self.set(row.mode, row.status, line.get("total") if row.status == "ok" else line.get("done"),
                 line.get("total"), force=True)

    def parity(self, mode, seed, done, total) -> None:
        self.set(f"{mode} seed {seed}", "done" if done == total else "training", done, total, force=done in (0, total))

    def doctor(self, msg: str) -> None:
        self.set("doctor", str(msg), None, None)

    # ------------------------------------------------------------------ the display
    def set(self, key: str, text: str, done, total, force: bool = False) -> None:
        self.lines[key] = {"text": text, "done": done, "total": total}
        now = self.clock()
        if force or self.last is None or now - self.last >= MIN_INTERVAL_S:
            self.show()

    def show(self) -> None:
        from IPython.display import display

        self.last = self.clock()
        snap = _Snapshot(self.html(), self.text())
        if self.handle is None:
            self.handle = display(snap, display_id=True)
        else:
            self.handle.update(snap)

    def close(self, interrupted: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        self.title += " — interrupted" if interrupted else " — done"
        if "doctor" in self.lines:  # its last step's words ("torch self-test bf16") are not its end (issue #49)
            line = self.lines["doctor"]
            line["text"] = f"stopped during {line['text']}" if interrupted else "finished"
        if self.lines or self.handle is not None:
            self.show()

    def text(self) -> str:
        parts = [f"{k} {v['text']}" + (f" {v['done']}/{v['total']}" if v["total"] else "") for k, v in self.lines.items()]
        return f"ampkit {self.title} ({self.clock() - self.start:.1f} s): " + "; ".join(parts)

    def html(self) -> str:
        rows = []
        for key, v in self.lines.items():
            done, total = v["done"], v["total"]
            bar = (f'<progress value="{int(done or 0)}" max="{int(total)}" style="width:14em"></progress> '
                   f"{int(done or 0)}/{int(total)}" if total else "")
            rows.append(f"<tr><td>{html.escape(key)}</td><td>{bar}</td><td>{html.escape(str(v['text']))}</td></tr>")
        return ('<div class="ampkit-progress" style="font-size:13px">'
                f"<div><b>ampkit {html.escape(self.title)}</b> · {self.clock() - self.start:.1f} s</div>"
                f'<table style="border-collapse:collapse">{"".join(rows)}</table></div>')


def notebook_progress(progress, title: str) -> NotebookProgress | None:
    """The display to use for ``progress`` (a library call's argument): one in a notebook when it
    is None (the default) or True; None when it is False, a callable, or not in a notebook."""
    if progress is False or callable(progress) or not in_notebook():
        return None
    return NotebookProgress(title)


def callback(progress, live: NotebookProgress | None, method: str):
    """What the command's driver gets as ``progress``: the live display's method, the user's own
    callable, or None (``False``/``True``/None outside a notebook)."""
    if live is not None:
        return getattr(live, method)
    return progress if callable(progress) else None


def shown(progress, title: str, method: str, call):
    """``call(progress_callback, live)`` under one live display (when :func:`notebook_progress` gives
    one); the display ends as done, or interrupted when the call raised or its report says so.
    ``progress`` is None or True (the display), False (none) or a callable: anything else is one
    UsageError (an int was called in every run, and every run failed with a TypeError)."""
    if not (progress is None or isinstance(progress, bool) or callable(progress)):
        from .errors import UsageError

        raise UsageError(f"progress must be a callable, None or True (the display in a notebook) or False (none); "
                         f"received {type(progress).__name__}")
    live = notebook_progress(progress, title)
    try:
        with quiet_native_logs(in_notebook()):
            report = call(callback(progress, live, method), live)
    except BaseException:
        if live:
            live.close(interrupted=True)
        raise
    if live:
        live.close(interrupted=bool(getattr(report, "interrupted", False)))
    return report


#: TensorFlow's C++ log level (absl) for a call from a notebook: its INFO/WARNING/ERROR lines at load
#: ("oneDNN custom operations are on", "failed call to cuInit") are not ampkit's output; a kernel shows
#: them as pink stderr blocks in the cell, once per process that loads TensorFlow (issue #49)
NATIVE_LOG_LEVEL = {"TF_CPP_MIN_LOG_LEVEL": "3"}


class quiet_native_logs:  # noqa: N801 -- a context manager named for what it does
    """In a notebook: the frameworks' native log level set for the call (and the child processes it
    starts, which inherit it) unless the user set it; restored afterwards. Python warnings and
    errors are untouched: a failure still reaches the cell as the exception or row it is."""

    def __init__(self, active: bool):
        self.active, self.set = active, []

    def __enter__(self):
        import os

        if self.active:
            for key, value in NATIVE_LOG_LEVEL.items():
                if key not in os.environ:
                    os.environ[key] = value
                    self.set.append(key)
        return self

    def __exit__(self, *exc):
        import os

        for key in self.set:
            os.environ.pop(key, None)
        return False
