"""Where output goes (one JSON document on stdout for ``--json -``, everything human on stderr then),
and what every presenter shares: the number words, the page's verdict tones, a document as the page
holds it, the rows of ``to_pandas()``."""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass, field

#: one colour per mode, the same in every chart ampkit draws (bench and parity PNGs, the report's charts)
MODE_COLORS = {"fp32": "#7f7f7f", "tf32": "#9467bd", "fp16": "#ff7f0e", "bf16": "#1f77b4", "fp8": "#e377c2"}
OTHER_COLOR = "#17becf"


def mode_color(mode: str) -> str:
    return MODE_COLORS.get(mode, OTHER_COLOR)


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


def write_json(doc: dict, path: str | None) -> None:
    """The document to ``path`` (atomically) or, for ``-``, alone to stdout."""
    from ..outputs import write_stdout, write_text

    if not path:
        return
    text = dumps(doc) + "\n"
    if path == "-":
        write_stdout(text)
    else:
        write_text(path, text)


def write_csv(rows: list[dict], path: str, columns: list[str]) -> None:
    """The rows to ``path`` (atomically) or, for ``-``, to stdout."""
    import io

    from ..outputs import atomic_write, write_stdout

    def fill(fh) -> None:
        w = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        for row in rows:
            w.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in columns})

    if path == "-":
        buf = io.StringIO(newline="")
        fill(buf)
        write_stdout(buf.getvalue())
        return
    with atomic_write(path, newline="") as fh:
        fill(fh)


def finite(x) -> float | None:
    """A number that can be drawn or printed, else None (JSON null, bools and non-numbers too)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def fmt(x, spec: str = ".3g", none: str = "—") -> str:
    if x is None:
        return none
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return format(x, spec)


def fmt_memory_ratio(saving, times: str = "x") -> str:
    """``memory_saving_vs_fp32`` (fp32 peak / this mode's peak) in words: "1.30x less", "1.10x more"."""
    saving = finite(saving)
    if saving is None or saving <= 0:
        return "—"
    if abs(saving - 1) < 0.005:
        return "same as fp32"
    return f"{saving:.2f}{times} less" if saving > 1 else f"{1 / saving:.2f}{times} more"


def fmt_bytes(n) -> str:
    """1536 -> "1.5 KiB" (binary units; "—" for none)."""
    n = finite(n)
    if n is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


#: the tone of a verdict or status word on the report's page (green, red, grey; neutral otherwise)
GOOD = {"recommended", "usable", "pass", "baseline", "ok", "clean"}
BAD = {"broken", "fail", "error", "oom", "nonfinite"}
MUTED = {"unsupported", "skip", "not_measured"}


def tone(word: str) -> str:
    return "good" if word in GOOD else "bad" if word in BAD else "muted" if word in MUTED else "neutral"


def verdict_row(key: str, word: str, detail: str = "") -> dict:
    """One row of the report page's verdict table: the word (and its detail) in the word's tone."""
    return {"key": key, "text": word + detail, "tone": tone(word)}


@dataclass
class PageView:
    """One document as the report's page (:mod:`ampkit.report`) shows it: rows of printable values."""

    doc: object  # the ampkit.report.load.Document it came from (None for a fresh report)
    rows: list[dict]
    chart: str = field(default="", kw_only=True)      # its chart as inline SVG, filled by the page's renderer
    chart_id: str = field(default="", kw_only=True)


@dataclass
class Document:
    """One command's report, read from a file (a ``--framework all`` doctor document yields one per framework)."""

    path: str
    command: str
    report: object   # DoctorReport | BenchReport | ParityReport | AuditReport
    version: str = ""  # the ampkit that wrote it
    interrupted: bool = False
    part: str | None = None  # "torch" / "tensorflow" for a part of a --framework all doctor document

    @property
    def environment(self) -> dict:
        return self.report.environment

    @property
    def label(self) -> str:
        name = os.path.basename(self.path)
        return f"{name} [{self.part}]" if self.part else name

    @property
    def framework(self) -> str:
        # the environment first: it is written by the framework's own code (an early TF audit said "torch")
        return str(self.environment.get("framework") or getattr(self.report, "framework", None) or "torch")


# ---------------------------------------------------------------- rows of to_pandas() and the CSV
NONE_FINISHED = "no mode finished"


def check_per(per: str | None, allowed: tuple[str, ...] = (), row: str = "mode") -> None:
    """``to_pandas(per=...)``: ``per="seed"`` only where the presenter has a row per seed (parity)."""
    if per is not None and per not in allowed:
        from ..errors import UsageError

        raise UsageError(f"to_pandas(per={per!r}): per='seed' is for a parity report (a row per mode and seed); "
                         f"leave it out for one row per {row}")


def head(doc: dict) -> dict:
    """The keys every row of a document's frame repeats: its framework and device."""
    return {k: doc.get(k) for k in ("framework", "device") if k in doc}


def flat(prefix: str, value, out: dict) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(v, (dict, list)):
                out[f"{prefix}_{k}"] = v


def pair(prefix: str, value, out: dict) -> None:
    ok = isinstance(value, list) and len(value) == 2
    out[f"{prefix}_low"], out[f"{prefix}_high"] = (value if ok else (None, None))


def rows_csv(rows: list[dict], path: str) -> None:
    """The rows of ``to_pandas()`` as CSV (the columns: every key, in the order they first come)."""
    write_csv(rows, path, list(dict.fromkeys(k for r in rows for k in r)))


def one_section(command: str):
    """``sections`` and ``headline`` of a presenter whose result is one section of its own and says
    itself in its sections' lines (every command but the doctor of several frameworks and the record)."""
    return (lambda result: [(command, result, None)]), (lambda result: None)


def csv_of(rows):
    """``to_csv`` writing what a presenter's ``rows`` give (every key a column)."""
    return lambda report, path: rows_csv(rows(report), path)
