"""Rendering a :class:`~ampkit.report.model.Report` through Jinja2 templates: HTML, Markdown, text."""

from __future__ import annotations

import os

from ..envelope import COMMANDS
from ..render import PRESENTERS, charts
from ..render.jinja import environment
from .model import Report


def _chart_id(env_letter: str, kind: str, i: int) -> str:
    return f"{env_letter.lower()}-{kind}-{i + 1}"


def attach_charts(report: Report, *, svg: bool = True, png_dir: str | None = None) -> dict[str, str]:
    """Draw every chart once: inline SVG into the views, PNGs into ``png_dir``; returns id -> PNG path."""
    pngs = {}
    for env in report.environments:
        for kind in COMMANDS:
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
