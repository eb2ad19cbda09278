"""The end every command shares: parse -> config -> driver -> :func:`finish`."""

from __future__ import annotations

import sys
from collections.abc import Callable


def finish(report, args, con, render: Callable, *, writers: dict[str, Callable] | None = None,
           kept: str = "", cause: BaseException | None = None, failed: bool | None = None) -> int:
    """``render(report, con)``; ``report.to_dict()`` to ``args.json``; for each ``flag -> write``
    in ``writers`` whose ``args.<flag>`` is set, ``write(report, path)``. ``kept``: what an
    interrupted report holds, in words ("the 2 mode(s) that finished"). ``failed`` overrides
    ``report.failed``."""
    from .. import signals
    from ..outputs import salvage
    from ..render.output import write_json

    interrupted = bool(getattr(report, "interrupted", False))
    if interrupted:
        signals.ignore_further()  # a second Ctrl-C must not cut the writing of what finished short
    render(report, con)
    # each output on its own: one that the OS refuses (a full disk, a folder gone mid-run) is one
    # line and a fallback file, never the loss of the others or of the results (outputs.salvage)
    lost = []
    command = getattr(args, "command", None) or "result"
    if getattr(args, "json", None):
        doc = report.to_dict()
        lost.append(salvage(lambda p: write_json(doc, p), args.json, "--json", f"ampkit-{command}.json"))
    for flag, write in (writers or {}).items():
        path = getattr(args, flag, None)
        if path:
            name = f"ampkit-{command}.{ {'plot': 'png'}.get(flag, flag) }"
            lost.append(salvage(lambda p, w=write: w(report, p), path, f"--{flag}", name))
    stopped = getattr(report, "error", None) if interrupted and cause is None else None
    if stopped:  # stopped by ampkit itself (--timeout), not by a signal: a failed run, exit 1
        print(f"ampkit: {stopped}" + (f"; kept {kept}" if kept else ""), file=sys.stderr)
        return 1
    if interrupted:
        print(f"ampkit: {signals.describe()}" + (f": kept {kept}" if kept else ""), file=sys.stderr)
        return signals.exit_code(cause)
    return 1 if any(lost) or (report.failed if failed is None else failed) else 0
