"""``ampkit report``: doctor, bench, parity and audit documents -> one self-contained page.

Framework-neutral on purpose: it reads JSON documents only, so it runs where torch or
TensorFlow (or neither) is installed. matplotlib draws the charts, Jinja2 fills the templates.

    from ampkit.report import load_all, build, html, markdown
    report = build(load_all(["doctor.json", "bench.json"]))
    page = html(report)
"""

from __future__ import annotations

from .load import Document, load, load_all
from .model import Report, build
from .render import html, markdown

__all__ = ["Document", "Report", "build", "html", "load", "load_all", "markdown"]
