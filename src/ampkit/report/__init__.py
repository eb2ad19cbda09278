"""``ampkit report``: doctor, bench, parity and audit documents -> one self-contained page."""

from __future__ import annotations

from .load import Document, load, load_all
from .model import Report, build
from .render import html, markdown

__all__ = ["Document", "Report", "build", "html", "load", "load_all", "markdown"]
