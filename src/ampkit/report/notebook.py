"""One result object in a notebook cell: the ``ampkit report`` page's section for its command.

:class:`ampkit.display.ResultDisplay` calls :func:`html` (``_repr_html_``) and :func:`line`
(``repr``). The section, the verdict rows and the chart are the page's own (the presenters of
:mod:`ampkit.report.model`, the section macros in ``templates/_sections.html.j2``, the charts of
:mod:`ampkit.render.charts`), so a cell and the page never disagree. The page's stylesheet comes
along scoped to the ``.ampkit-nb`` block (the page styles ``body`` and ``table``; a notebook
output must not restyle JupyterLab around it). No script, no URL: it shows the same in JupyterLab,
VS Code, an nbconvert HTML export and a browser without JavaScript.
"""

from __future__ import annotations

import itertools
import re

from .._version import __version__
from ..render import charts
from .load import Document
from .model import PRESENTERS
from .render import environment

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


def _parts(result) -> list[tuple[str, object, str | None]]:
    """(command, report, part) for each section the result shows: a ``--framework all`` doctor has one
    per framework; a trainer callback's record shows as the audit document it writes."""
    command = getattr(result, "display_command", "")
    if command == "doctor" and isinstance(getattr(result, "reports", None), dict):
        return [("doctor", r, name) for name, r in result.reports.items()]
    if command in PRESENTERS:
        return [(command, result, None)]
    if command == "callback":
        from ..audit.report import AuditReport

        return [("audit", AuditReport.from_dict(result.to_dict()), None)]
    return []


def views(result) -> list[tuple[str, object]]:
    """The page views of a result, charts drawn as inline SVG (ids unique in the notebook page)."""
    out = []
    for command, report, part in _parts(result):
        doc = Document(f"ampkit.{command}()", command, report, __version__,
                       bool(getattr(report, "interrupted", False) or getattr(result, "interrupted", False)), part=part)
        view = PRESENTERS[command].page_view(report, doc)
        if command != "doctor":
            fig = charts.draw(PRESENTERS[command].figure, view)
            if fig is not None:
                view.chart_id = f"nb{next(_serial)}-{command}"
                view.chart = charts.svg(fig, view.chart_id, f"{command} chart")
        out.append((command, view))
    return out


def html(result) -> str:
    """The cell's HTML: the verdict line first, each section with its table, chart and findings."""
    shown = views(result)
    verdicts = [row for command, view in shown for row in PRESENTERS[command].verdicts(view)]
    table = None
    if not shown:  # a result without a section of its own (a new command): its rows, generically
        from ..display import frame_rows

        rows = frame_rows(result)
        columns = list(dict.fromkeys(k for r in rows for k in r))
        table = {"columns": columns, "rows": rows}
    headline = result.summary_line() if getattr(result, "display_command", "") == "callback" else _generic_line(result, shown)
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
_NONE = "no mode finished"


def _bench_cell(r: dict) -> str:
    if r["status"] != "ok":
        return f"{r['mode']} {r['status']}"
    if r["mode"] == "fp32" or r["speedup_verdict"] == "baseline":
        return f"{r['mode']} baseline"
    if r["flags"]:
        return f"{r['mode']} no speedup claimed"
    if r["speedup"] is None:
        return f"{r['mode']} ok"
    return f"{r['mode']} {r['speedup']:.2f}× {r['speedup_verdict'] or 'one run, no interval'}"


def _line_of(command: str, view) -> str:
    if command == "bench":
        return f"bench {view.workload} on {view.device}: " + (", ".join(_bench_cell(r) for r in view.rows) or _NONE)
    if command == "parity":
        return f"parity {view.dataset} on {view.device}: " + (
            ", ".join(f"{r['mode']} {r['verdict']}" for r in view.rows) or _NONE)
    if command == "doctor":
        others = ", ".join(f"{r['mode']} {r['verdict']}" for r in view.rows if r["mode"] != view.recommended)
        said = f"recommended {view.recommended}" if view.recommended else f"recommended none ({view.reason})"
        return f"doctor {view.doc.framework} on {view.device}: {said}" + (f"; {others}" if others else "")
    if command == "plan":
        kept = ", ".join(f"{p} {m}" for p, m in view.modules.items())
        return f"plan {view.workload} on {view.device}: {view.default}" + (f" ({kept})" if kept else "") + f"; {view.status}"
    verdict = PRESENTERS["audit"].verdicts(view)[0]["text"]
    if view.what_if:  # float32 steps only: the verdicts are per format, not of the mode
        return f"audit --what-if {view.workload} on {view.device}: {verdict}"
    return f"audit {view.workload} in {view.mode} on {view.device}: {verdict}"


def line(result) -> str:
    """``<ampkit bench mlp on cpu: fp32 baseline, bf16 0.52× slower>`` -- command, subject, modes, verdict."""
    command = getattr(result, "display_command", "")
    if command == "callback":
        return f"<ampkit {result.summary_line()}>"
    parts = []
    for kind, report, part in _parts(result):
        view = PRESENTERS[kind].page_view(report, Document(f"ampkit.{kind}()", kind, report, __version__, part=part))
        parts.append(_line_of(kind, view))
    interrupted = " (interrupted)" if getattr(result, "interrupted", False) else ""
    if not parts:  # a result with nothing in it (an interrupted doctor of several frameworks): said so
        empty = ": nothing finished" if command == "doctor" else ""
        return f"<ampkit {_generic_line(result, [])}{empty}{interrupted}>"
    text = " | ".join(parts).replace("not_measured", "not measured")
    if getattr(result, "unpaired_runs", None):  # parity: an unfinished seed's runs, kept for --resume
        text += f"; {len(result.unpaired_runs)} unpaired run(s) kept"
    if text.endswith("interrupted"):  # the line already says it (a plan's status)
        interrupted = ""
    return f"<ampkit {text}{interrupted}>"
