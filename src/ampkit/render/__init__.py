"""How each command's document is shown: one presenter per command, each with the same functions
(:data:`FUNCTIONS`) -- the console table, the CSV, the page section, the notebook's sections and
line, the rows of ``to_pandas()``, the verdict sentences and the figure."""

from __future__ import annotations

from . import audit, bench, callback, doctor, parity, plan

PRESENTERS = {"doctor": doctor, "bench": bench, "parity": parity, "audit": audit, "plan": plan, "callback": callback}
#: what every presenter defines: (report, con), (report, path), (report, doc), (result), (result),
#: (view), (result, per), (view), (view)
FUNCTIONS = ("render", "to_csv", "page_view", "sections", "headline", "line", "rows", "verdicts", "figure")


def presenter_of(result):
    """The presenter of a result object (its ``display_command``), or None for one without a presenter."""
    return PRESENTERS.get(getattr(result, "display_command", "") or "")
