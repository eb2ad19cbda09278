"""Result objects in a notebook: rich HTML, a one-line ``repr`` and a DataFrame."""

from __future__ import annotations

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
        from .render import notebook

        return notebook.html(self)

    def _ipython_display_(self) -> None:
        """In a notebook: the HTML, then each chart as an ``image/png`` output (shown in a notebook
        JupyterLab does not trust too, where inline SVG is sanitized away)."""
        from IPython.display import display

        from .render import notebook

        for bundle in notebook.outputs(self):
            display(bundle, raw=True)

    def __repr__(self) -> str:
        try:
            from .render import notebook

            return shorten(notebook.line(self))
        except Exception as exc:  # noqa: BLE001 -- a repr never raises (a debugger or a log calls it)
            return shorten(f"<ampkit {self.display_command or type(self).__name__} (not shown: {type(exc).__name__})>")

    def to_pandas(self, per: str | None = None):
        """A ``pandas.DataFrame``, one row per mode (bench, parity, doctor), per layer (audit) or, for
        parity with ``per="seed"``, per (mode, seed) run; columns include the contract's JSON keys
        (nested objects as columns of dicts, and flattened beside them: ``step_ms_p50``, ``metric_mean``)."""
        from .render import notebook

        pd = require_pandas()
        return pd.DataFrame(notebook.rows(self, per))

    def to_json(self, path=None) -> str:
        """The JSON document the command's ``--json`` writes (inf/NaN as null); written to ``path``
        too when given (atomically), for ``ampkit report`` to read. Returns the text."""
        from .render.output import dumps, write_json

        doc = self.to_dict()
        if path is not None:
            write_json(doc, str(path))
        return dumps(doc)


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
