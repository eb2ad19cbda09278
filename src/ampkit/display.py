"""Result objects in a notebook: rich HTML, a one-line ``repr`` and a DataFrame.

Every result object (doctor, bench, parity, audit, the callbacks' record, and any later one such as
the precision plan) adopts this with one line, its base class and its command::

    @dataclass
    class PlanReport(ResultDisplay, command="plan"):
        ...

and gains ``_repr_html_`` (Jupyter shows it as the last expression of a cell: the verdict line, the
table, the chart as inline SVG, findings and advice -- the same section ``ampkit report`` shows for
its document), a ``repr`` of one line under 200 characters (command, subject, modes, verdict) in
place of the dataclass's field dump, ``to_pandas()`` (one row per mode, seed or layer) and
``to_json(path)`` (the document ``--json`` writes, for ``ampkit report``).

A command the report page knows is drawn by its section (:mod:`ampkit.report.notebook`); any other
gets a generic table of its rows (:func:`frame_rows`), so a new result type displays before it has
a section of its own. This module imports nothing heavy: jinja2, matplotlib and pandas load when a
result is first shown or exported.
"""

from __future__ import annotations

import importlib

#: the longest ``repr`` a result may have (the contract: one line under 200 characters)
REPR_LIMIT = 199
INSTALL_HINT = "pip install 'ampkit[notebook]'"


class ResultDisplay:
    """Mixin: ``_repr_html_``, a one-line ``__repr__`` and ``to_pandas()`` for a result object.

    ``@dataclass`` writes its own ``__repr__`` unless the class defines one in its body, so
    ``__init_subclass__`` puts the short one there before the decorator runs.
    """

    display_command: str = ""

    def __init_subclass__(cls, command: str | None = None, **kwargs):
        super().__init_subclass__(**kwargs)
        if command is not None:
            cls.display_command = command
        if "__repr__" not in cls.__dict__:
            cls.__repr__ = ResultDisplay.__repr__

    def _repr_html_(self) -> str:
        return _renderer().html(self)

    def __repr__(self) -> str:
        try:
            return shorten(_renderer().line(self))
        except Exception as exc:  # noqa: BLE001 -- a repr never raises (a debugger or a log calls it)
            return shorten(f"<ampkit {self.display_command or type(self).__name__} (not shown: {type(exc).__name__})>")

    def to_pandas(self, per: str | None = None):
        """A ``pandas.DataFrame``, one row per mode (bench, parity, doctor), per layer (audit) or, for
        parity with ``per="seed"``, per (mode, seed) run; columns include the contract's JSON keys
        (nested objects as columns of dicts, and flattened beside them: ``step_ms_p50``, ``metric_mean``)."""
        pd = require_pandas()
        return pd.DataFrame(frame_rows(self, per))

    def to_json(self, path=None) -> str:
        """The JSON document the command's ``--json`` writes (inf/NaN as null); written to ``path``
        too when given (atomically), for ``ampkit report`` to read. Returns the text."""
        from .render.output import dumps, write_json

        doc = self.to_dict()
        if path is not None:
            write_json(doc, str(path))
        return dumps(doc)


def _renderer():
    # by name: the renderer sits above the result classes (it reads their documents), so a static
    # import here would close a cycle; this is the same late binding as ampkit's lazy command packages
    return importlib.import_module("ampkit.report.notebook")


def require_pandas():
    try:
        import pandas
    except ImportError:
        raise ModuleNotFoundError(f"ampkit: to_pandas() needs pandas, which is not installed: {INSTALL_HINT}") from None
    return pandas


def shorten(text: str, limit: int = REPR_LIMIT) -> str:
    """One line of at most ``limit`` characters (an ellipsis where it was cut; a closing ``>`` kept)."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    tail = ">" if text.endswith(">") else ""
    return text[:limit - 1 - len(tail)].rstrip() + "…" + tail


def _flat(prefix: str, value, out: dict) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(v, (dict, list)):
                out[f"{prefix}_{k}"] = v


def _pair(prefix: str, value, out: dict) -> None:
    ok = isinstance(value, list) and len(value) == 2
    out[f"{prefix}_low"], out[f"{prefix}_high"] = (value if ok else (None, None))


def frame_rows(result, per: str | None = None) -> list[dict]:
    """The rows of ``to_pandas()``: dicts whose keys start with the contract's."""
    doc = result.to_dict()
    command = getattr(result, "display_command", "") or doc.get("command", "")
    if per not in (None, "seed") or (per == "seed" and command != "parity"):
        from .errors import UsageError

        raise UsageError(f"to_pandas(per={per!r}): per='seed' is for a parity report (a row per mode and seed); "
                         f"leave it out for one row per {'layer' if command == 'audit' else 'mode'}")
    head = {k: doc.get(k) for k in ("framework", "device") if k in doc}
    if command == "bench":
        rows = []
        for r in doc["results"]:
            row = {"workload": doc.get("workload"), **head, **r}
            _flat("step_ms", r.get("step_ms"), row)
            _pair("speedup_ci", r.get("speedup_ci"), row)
            rows.append(row)
        return rows
    if command == "parity":
        if per == "seed":
            # an interrupted run's unpaired runs too (outside the statistics): "paired" tells them apart
            return [{"dataset": doc.get("dataset"), **head, **run, **({"paired": not alone} if doc.get("unpaired_runs") else {})}
                    for alone, runs in ((False, [x for p in doc["results"] for x in p.get("runs") or []]),
                                        (True, doc.get("unpaired_runs") or [])) for run in runs]
        rows = []
        for p in doc["results"]:
            row = {"dataset": doc.get("dataset"), **head, **{k: v for k, v in p.items() if k != "runs"}}
            _flat("final_loss", p.get("final_loss"), row)
            _flat("metric", p.get("metric"), row)
            _flat("equivalence", p.get("equivalence"), row)
            rows.append(row)
        return rows
    if command in ("audit", "callback"):  # a trainer callback's record writes an audit document
        first = doc.get("first_nonfinite") or {}
        kinds: dict[str, list[str]] = {}
        for f in doc.get("findings") or []:
            kinds.setdefault(f.get("layer"), []).append(f.get("kind"))
        return [{"workload": doc.get("workload"), **head, "mode": doc.get("mode"), "loss_scale": doc.get("loss_scale"),
                 "index": i, **lay,
                 "first_nonfinite": (first.get("name") or "(model)") == (lay.get("name") or "(model)") if first else False,
                 "findings": list(dict.fromkeys(kinds.get(lay.get("name"), [])))}
                for i, lay in enumerate(doc.get("layers") or [])]
    if command == "plan":  # one row per candidate tried, with its figures
        return [{"workload": doc.get("workload"), **head, **t} for t in doc.get("tried") or []]
    if command == "doctor":
        parts = doc.get("frameworks") or {doc.get("framework"): doc}
        return [{"framework": fw, "device": part.get("device"), "mode": mode, **m,
                 "recommended": part.get("recommended") == mode}
                for fw, part in parts.items() for mode, m in (part.get("modes") or {}).items()]
    return generic_rows(doc)


def generic_rows(doc: dict) -> list[dict]:
    """A result without a table of its own: its first list of objects, else its first object of
    objects or of values (a plan's ``modules``: pattern -> mode) as key/value rows."""
    for value in doc.values():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            return list(value)
    for key, value in doc.items():
        if key != "environment" and isinstance(value, dict) and value:
            return [{"name": k, **v} if isinstance(v, dict) else {"name": k, "value": v} for k, v in value.items()]
    return [{k: v for k, v in doc.items() if not isinstance(v, (dict, list))}]
