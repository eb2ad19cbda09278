"""Reading the JSON documents that doctor, bench, parity and audit write: files -> typed reports.

The schema is the report classes' own: each document goes through ``DoctorReport.from_dict``,
``BenchReport.from_dict``, ``ParityReport.from_dict``, ``AuditReport.from_dict`` (or
``DoctorSet.from_dict`` for a ``doctor --framework all`` document), which check the keys the
contract promises (:mod:`ampkit.envelope`). This module reads the files and parses the JSON; every
problem is a :class:`~ampkit.errors.UsageError` that names the file and what is wrong with it, so
the command line prints one line and exits 2.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from ..envelope import DocumentError, open_envelope
from ..errors import UsageError

#: refuse anything larger: ampkit's own documents are kilobytes (an audit of a big model: a few MB)
MAX_BYTES = 256 * 1024 * 1024


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


def documents(path: str, doc) -> list[Document]:
    """A parsed document -> its typed reports. Raises :class:`~ampkit.envelope.DocumentError`."""
    from ..audit.report import AuditReport
    from ..bench.report import BenchReport
    from ..doctor.report import DoctorReport, DoctorSet
    from ..parity.report import ParityReport
    from ..plan.report import PlanReport

    command = open_envelope(doc)
    version = "" if doc["ampkit_version"] in (None, "") else str(doc["ampkit_version"])
    if command == "doctor" and "frameworks" in doc:
        whole = DoctorSet.from_dict(doc)
        return [Document(path, command, report, version, whole.interrupted, part=name)
                for name, report in whole.reports.items()]
    cls = {"doctor": DoctorReport, "bench": BenchReport, "parity": ParityReport, "audit": AuditReport,
           "plan": PlanReport}[command]
    report = cls.from_dict(doc)
    return [Document(path, command, report, version, bool(getattr(report, "interrupted", False)))]


def _read_text(path: str) -> str:
    if not os.path.exists(path):
        raise UsageError(f"{path}: no such file; pass JSON files written by 'ampkit doctor|bench|parity|audit --json PATH'")
    if os.path.isdir(path):
        raise UsageError(f"{path}: is a directory, not a JSON document; pass the .json files in it instead")
    try:
        size = os.path.getsize(path)
        if size > MAX_BYTES:
            raise UsageError(f"{path}: {size} bytes is too large for an ampkit document (limit {MAX_BYTES})")
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror or exc}); check the path and its permissions")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not a JSON document (not UTF-8 text); pass a file written with --json PATH")


def _unclosed(text: str) -> bool:
    """Whether ``text`` ends inside a string or with brackets still open: a document cut off."""
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
    return in_string or depth > 0


def _parse(path: str, text: str):
    if not text.strip():
        raise UsageError(f"{path}: the file is empty; re-run the command that writes it with --json PATH")

    try:  # NaN/Infinity (not JSON, but Python writes them) are accepted and shown as "—"
        return json.loads(text)
    except json.JSONDecodeError as exc:
        body = text.strip()
        if body[:1] in "{[" and _unclosed(body):
            raise UsageError(f"{path}: truncated JSON (the text ends at line {exc.lineno} before the document "
                             f"is complete); the writer was cut off: re-run it with --json PATH") from None
        raise UsageError(f"{path}: not a JSON document ({exc.msg} at line {exc.lineno} column {exc.colno}); "
                         f"pass a file written with --json PATH") from None
    except RecursionError:
        raise UsageError(f"{path}: not an ampkit document (nested too deeply)") from None


def load(path: str) -> list[Document]:
    """One file -> its documents (two for a ``--framework all`` doctor document)."""
    doc = _parse(path, _read_text(path))
    if isinstance(doc, dict) and doc.get("kind") == "ampkit-plan":  # a plan file, not a result document
        raise UsageError(f"{path}: a precision plan (what to keep in float32), not a result document; run it with "
                         "'ampkit bench|parity --plan PATH', or pass the document 'ampkit plan --json PATH' wrote")
    try:
        return documents(path, doc)
    except DocumentError as exc:
        raise UsageError(f"{path}: not an ampkit document: {exc}; pass files written by "
                         f"'ampkit doctor|bench|parity|audit --json PATH'") from None


def load_all(paths: list[str]) -> list[Document]:
    """Every file in order; the first bad one stops the run (exit 2, naming it)."""
    if not paths:
        raise UsageError("no documents given: pass one or more JSON files written by "
                         "'ampkit doctor|bench|parity|audit --json PATH'")
    docs: list[Document] = []
    seen: set[str] = set()
    for path in paths:
        key = os.path.realpath(path)
        if key in seen:
            continue
        seen.add(key)
        docs.extend(load(path))
    return docs
