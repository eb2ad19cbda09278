"""Rendering a :class:`~ampkit.report.model.Report` through Jinja2 templates: HTML, Markdown, text.

The HTML page is self-contained: styles inline, charts inline SVG, no script, no URL.
The Markdown uses the same model and links PNG charts when a plots folder is given.
"""

from __future__ import annotations

import os

from ..render import charts
from ..render.output import finite, fmt_bytes
from .model import PRESENTERS, Report

_FILTERS = {}


def _filter(fn):
    _FILTERS[fn.__name__] = fn
    return fn


@_filter
def num(x, spec: str = ".3g", none: str = "—") -> str:
    return none if finite(x) is None else format(x, spec)


_FILTERS["size"] = fmt_bytes


@_filter
def pct(x, digits: int = 1) -> str:
    return "—" if x is None else f"{x * 100:.{digits}f}%"


@_filter
def times(x) -> str:
    return "—" if x is None else f"{x:.2f}×"


@_filter
def interval(ci) -> str:
    return "—" if not ci or None in ci else f"[{ci[0]:.2f}, {ci[1]:.2f}]"


@_filter
def yesno(x) -> str:
    return "—" if x is None else ("yes" if x else "no")


@_filter
def md(text) -> str:
    """A Markdown table cell: no pipes or newlines leak out of it."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("\r", " ")


def environment(autoescape: bool):
    """The templates' Jinja2 environment (the page, the Markdown, the notebook display)."""
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(loader=PackageLoader("ampkit.render", "templates"), autoescape=autoescape,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters.update(_FILTERS)
    return env


def _chart_id(env_letter: str, kind: str, i: int) -> str:
    return f"{env_letter.lower()}-{kind}-{i + 1}"


def attach_charts(report: Report, *, svg: bool = True, png_dir: str | None = None) -> dict[str, str]:
    """Draw every chart once: inline SVG into the views, PNGs into ``png_dir``; returns id -> PNG path."""
    pngs = {}
    for env in report.environments:
        for kind in ("bench", "parity", "audit"):
            for i, view in enumerate(getattr(env, kind)):
                fig = charts.draw(PRESENTERS[kind].figure, view)
                if fig is None:
                    continue
                view.chart_id = _chart_id(env.letter, kind, i)
                if svg:
                    view.chart = charts.svg(fig, view.chart_id, f"{kind} chart of {view.doc.label}")
                if png_dir:
                    path = os.path.join(png_dir, f"{view.chart_id}.png")
                    charts.save(fig, path)
                    pngs[view.chart_id] = path
    return pngs


def html(report: Report) -> str:
    attach_charts(report)
    return environment(True).get_template("report.html.j2").render(r=report)


def markdown(report: Report, plots: dict[str, str] | None = None, md_path: str | None = None) -> str:
    """Markdown; ``plots`` maps chart ids to PNG files, linked relative to the Markdown file."""
    links = {}
    base = os.path.dirname(os.path.abspath(md_path)) if md_path and md_path != "-" else os.getcwd()
    for cid, path in (plots or {}).items():
        links[cid] = os.path.relpath(os.path.abspath(path), base).replace(os.sep, "/")
    return environment(False).get_template("report.md.j2").render(r=report, links=links)
