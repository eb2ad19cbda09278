"""How a trainer callback's record is shown: its summary line, and the audit document it writes as
the audit presenter shows one (the record hands over that document as an audit report)."""

from __future__ import annotations

from . import audit
from .output import csv_of

page_view, verdicts, figure, line = audit.page_view, audit.verdicts, audit.figure, audit.line


def render(record, con) -> None:
    con.print(record.summary_line(), markup=False, highlight=False)
    audit.render(record.audit_report(), con)


def sections(record) -> list[tuple[str, object, str | None]]:
    return [("audit", record.audit_report(), None)]


def headline(record) -> str:
    return record.summary_line()


def rows(record, per: str | None = None) -> list[dict]:
    return audit.rows(record, per)


to_csv = csv_of(rows)
