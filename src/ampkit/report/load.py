"""Reading the JSON documents that doctor, bench, parity and audit write: files -> typed reports."""

from __future__ import annotations

import os

from ..envelope import DocumentError, not_a_document, open_envelope, read_json
from ..errors import UsageError
from ..render.output import Document


def documents(path: str, doc) -> list[Document]:
    """A parsed document -> its typed reports, one per part (a ``--framework all`` doctor document
    has one per framework). Raises :class:`~ampkit.envelope.DocumentError`."""
    from ..audit.report import AuditReport
    from ..bench.report import BenchReport
    from ..doctor.report import from_document
    from ..parity.report import ParityReport
    from ..plan.report import PlanReport

    readers = {"doctor": from_document, "bench": BenchReport.from_dict, "parity": ParityReport.from_dict,
               "audit": AuditReport.from_dict, "plan": PlanReport.from_dict}
    command = open_envelope(doc)
    version = "" if doc["ampkit_version"] in (None, "") else str(doc["ampkit_version"])
    whole = readers[command](doc)
    parts = whole.reports if isinstance(getattr(whole, "reports", None), dict) else {None: whole}
    return [Document(path, command, report, version, bool(getattr(whole, "interrupted", False)), part=name)
            for name, report in parts.items()]


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
