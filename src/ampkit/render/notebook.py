"""One result object in a notebook cell: the ``ampkit report`` page's section for its command."""

from __future__ import annotations

import base64
import itertools
import re

from .._version import __version__
from . import PRESENTERS, charts, presenter_of
from .jinja import environment
from .output import Document, check_per

SCOPE = ".ampkit-nb"
#: extra rules of the notebook block (the page's stylesheet comes first, scoped)
EXTRA_CSS = (".ampkit-nb { max-width: 1180px; }\n"
             ".ampkit-nb .verdict-line { margin: 4px 0 8px; }\n"
             ".ampkit-nb .verdict-line > span { padding: 1px 6px; border-radius: 8px; }\n"
             ".ampkit-nb .t-good { color: var(--good); background: var(--good-bg); }\n"
             ".ampkit-nb .t-bad { color: var(--bad); background: var(--bad-bg); }\n"
             ".ampkit-nb .t-neutral { color: var(--mid); background: var(--mid-bg); }\n"
             ".ampkit-nb h3 { margin-top: 4px; }\n"
             # JupyterLab right-aligns every cell of an output's table with a (0,2,1) selector
             # (:not(.jp-RenderedMarkdown).jp-RenderedHTMLCommon td): the page's alignment, one class stronger
             ".ampkit-nb.ampkit-nb th, .ampkit-nb.ampkit-nb td, .ampkit-nb.ampkit-nb tr { text-align: left; }\n"
             ".ampkit-nb.ampkit-nb td.n { text-align: right; }")
_serial = itertools.count(1)
_RULE = re.compile(r"([^{}]+)\{([^{}]*)\}")


def scoped(css: str, scope: str = SCOPE) -> str:
    """Every rule of ``css`` limited to the block ``scope`` (``:root``/``body`` become the block itself)."""
    def one(sel: str) -> str:
        sel = sel.strip()
        if sel in (":root", "body", "main", "html"):
            return scope
        return f"{scope} {sel}"

    return _RULE.sub(lambda m: ", ".join(one(s) for s in m.group(1).split(",")) + " {" + m.group(2) + "}", css)


def _css() -> str:
    return scoped(environment(True).get_template("_style.css.j2").render()) + "\n" + EXTRA_CSS


def views(result, drawn: bool = True, images: list | None = None) -> list[tuple[str, object]]:
    """The page views of a result's sections (its presenter's), charts drawn as inline SVG when
    ``drawn`` (ids unique in the notebook page), or, with ``images`` (a list), as PNG bytes appended
    to it and left out of the HTML."""
    presenter = presenter_of(result)
    out = []
    for command, report, part in presenter.sections(result) if presenter else []:
        doc = Document(f"ampkit.{command}()", command, report, __version__,
                       bool(getattr(report, "interrupted", False) or getattr(result, "interrupted", False)), part=part)
        view = PRESENTERS[command].page_view(report, doc)
        fig = charts.draw(PRESENTERS[command].figure, view) if drawn else None
        if fig is not None:
            view.chart_id = f"nb{next(_serial)}-{command}"
            if images is None:
                view.chart = charts.svg(fig, view.chart_id, f"{command} chart")
            else:
                images.append((command, charts.png(fig)))
        out.append((command, view))
    return out


def outputs(result) -> list[dict]:
    """What a notebook cell shows for ``result`` (:meth:`ampkit.display.ResultDisplay._ipython_display_`):
    MIME bundles, one output each -- the HTML (verdicts, tables, findings) and each chart as an
    ``image/png`` output. A saved notebook opened elsewhere is untrusted: JupyterLab sanitizes its
    HTML (styles and inline SVG dropped, issue #49), while an image output shows as it is."""
    images: list = []
    page = html(result, images)
    out = [{"text/html": page, "text/plain": line(result)}]
    out += [{"image/png": base64.b64encode(data).decode("ascii"), "text/plain": f"{command} chart"}
            for command, data in images]
    return out


def html(result, images: list | None = None) -> str:
    """The cell's HTML: the verdict line first, each section with its table, chart and findings
    (the charts as inline SVG, or with ``images`` collected there as PNG: :func:`views`)."""
    shown = views(result, images=images)
    verdicts = [row for command, view in shown for row in PRESENTERS[command].verdicts(view)]
    table = None
    if not shown:  # a result without a section of its own (a new command): its rows, generically
        found = rows(result)
        table = {"columns": list(dict.fromkeys(k for r in found for k in r)), "rows": found}
    presenter = presenter_of(result)
    headline = (presenter.headline(result) if presenter else None) or _generic_line(result, shown)
    return environment(True).get_template("notebook.html.j2").render(
        command=getattr(result, "display_command", ""), css=_css(), headline=headline, verdicts=verdicts,
        views=shown, table=table, version=__version__)


def _generic_line(result, shown) -> str | None:
    if shown:
        return None
    doc = result.to_dict()
    words = [f"{k} {doc[k]}" for k in ("default", "verdict", "status") if isinstance(doc.get(k), str)]
    return f"{getattr(result, 'display_command', '') or type(result).__name__}" + (": " + ", ".join(words) if words else "")


# ---------------------------------------------------------------- the one-line repr
def line(result) -> str:
    """``<ampkit bench mlp on cpu: fp32 baseline, bf16 0.52× slower>`` -- command, subject, modes, verdict."""
    presenter = presenter_of(result)
    own = presenter.headline(result) if presenter else None
    if own:  # a result that says itself in a line (a trainer callback's summary)
        return f"<ampkit {own}>"
    parts = [PRESENTERS[command].line(view) for command, view in views(result, drawn=False)]
    interrupted = " (interrupted)" if getattr(result, "interrupted", False) else ""
    if not parts:  # a result with nothing in it (an interrupted doctor of several frameworks): said so
        empty = ": nothing finished" if presenter else ""
        return f"<ampkit {_generic_line(result, [])}{empty}{interrupted}>"
    text = " | ".join(parts).replace("not_measured", "not measured")
    if text.endswith("interrupted"):  # the line already says it (a plan's status)
        interrupted = ""
    return f"<ampkit {text}{interrupted}>"


# ---------------------------------------------------------------- the rows of to_pandas()
def rows(result, per: str | None = None) -> list[dict]:
    """The rows of ``to_pandas()``: dicts whose keys start with the contract's (the presenter's rows)."""
    presenter = presenter_of(result)
    if presenter:
        return presenter.rows(result, per)
    check_per(per)
    return generic_rows(result.to_dict())


def generic_rows(doc: dict) -> list[dict]:
    """A result without a presenter: its first list of objects, else its first object of objects or
    of values (a plan's ``modules``: pattern -> mode) as key/value rows."""
    for value in doc.values():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            return list(value)
    for key, value in doc.items():
        if key != "environment" and isinstance(value, dict) and value:
            return [{"name": k, **v} if isinstance(v, dict) else {"name": k, "value": v} for k, v in value.items()]
    return [{k: v for k, v in doc.items() if not isinstance(v, (dict, list))}]
