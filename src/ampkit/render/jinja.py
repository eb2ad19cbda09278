"""The Jinja2 environment of the templates (``templates/``): the report page, its Markdown and the
notebook display, with the filters that print numbers the same way in all three."""

from __future__ import annotations

from ..stats import ratio_text
from .output import finite, fmt_bytes

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
    return "—" if x is None else f"{ratio_text(x)}×"


@_filter
def interval(ci) -> str:
    return "—" if not ci or None in ci else f"[{ratio_text(ci[0])}, {ratio_text(ci[1])}]"


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
