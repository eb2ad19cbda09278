"""Reading the JSON documents that doctor, bench, parity and audit write: files -> typed reports.

The schema is the report classes' own: each document goes through ``DoctorReport.from_dict``,
``BenchReport.from_dict``, ``ParityReport.from_dict``, ``AuditReport.from_dict`` (or
``DoctorSet.from_dict`` for a ``doctor --framework all`` document), which check the keys the
contract promises (:mod:`ampkit.envelope`). This module reads the files and parses the JSON; every
problem is a :class:`~ampkit.errors.UsageError` that names the file and what is wrong with it, so
the command line prints one line and exits 2.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..envelope import DocumentError, not_a_document, open_envelope, read_json
from ..errors import UsageError


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


def load(path: str) -> list[Document]:
    """One file -> its documents (two for a ``--framework all`` doctor document)."""
    doc = read_json(path)
    try:
        return documents(path, doc)
    except DocumentError as exc:
        raise not_a_document(path, exc) from None


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
