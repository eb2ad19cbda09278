"""Where output goes: one JSON document on stdout for ``--json -``, everything human on stderr then."""

from __future__ import annotations

import csv
import json
import math
import os
import sys

from ..errors import UsageError


def console(json_to_stdout: bool):
    """The human console: stderr when stdout carries the JSON document.

    Not a terminal (a pipe, a CI log) and no COLUMNS set: 140 columns rather than rich's 80,
    so the tables are not folded in logs.
    """
    from rich.console import Console

    con = Console(stderr=json_to_stdout, highlight=False)
    if not con.is_terminal and "COLUMNS" not in os.environ:
        con = Console(stderr=json_to_stdout, highlight=False, width=140)
    return con


def print_keras_line(report, con) -> None:
    """``Keras: tf_keras 2.21.0``, above a TensorFlow report's table: which Keras ran (nothing for torch).

    A line of its own: a table's title folds to the table's width, which can split it."""
    keras = (getattr(report, "environment", None) or {}).get("keras")
    if keras:
        con.print(f"Keras: {keras}")


def _clean(obj):
    """JSON has no NaN/inf: write them as null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def dumps(doc: dict) -> str:
    return json.dumps(_clean(doc), indent=2, allow_nan=False)


def check_writable(path: str | None, what: str = "output") -> None:
    """Fail early (exit 2) on an output path that cannot be written, before any long run."""
    if not path or path == "-":
        return
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"cannot write {what} {path!r}: folder {parent!r} does not exist")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"cannot write {what} {path!r}: folder {parent!r} is not writable")


def write_json(doc: dict, path: str | None) -> None:
    if not path:
        return
    text = dumps(doc)
    if path == "-":
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
        return
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text + "\n")
    os.replace(tmp, path)


def write_csv(rows: list[dict], path: str, columns: list[str]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        for row in rows:
            w.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in columns})
    os.replace(tmp, path)


def fmt(x, spec: str = ".3g", none: str = "—") -> str:
    if x is None:
        return none
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return format(x, spec)


def fmt_bytes(n) -> str:
    if n is None:
        return "—"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
