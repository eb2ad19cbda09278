"""What every chart ampkit draws shares: style, one colour per mode, bar panels, and the two ways
out -- a file (``bench/parity --plot``, the report's ``--plots``) and an inline ``<svg>`` (the report's page)."""

from __future__ import annotations

import io
import re

from .output import MODE_COLORS, mode_color

__all__ = ["BAD", "MODE_COLORS", "color", "draw", "figure", "plot", "png", "save", "slant", "svg"]
BAD = "#d62728"
STYLE = {"text.parse_math": False, "svg.fonttype": "none", "svg.hashsalt": "ampkit-report", "font.size": 9,
         "axes.titlesize": 10, "axes.spines.top": False, "axes.spines.right": False}
color = mode_color


def draw(fn, *args):
    """``fn(*args)`` (a function that builds a Figure) under the charts' style."""
    import matplotlib

    with matplotlib.rc_context(STYLE):
        return fn(*args)


def figure(width: float, height: float, ncols: int):
    """A constrained-layout figure and its ``ncols`` axes in a row."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, list(fig.subplots(1, ncols, squeeze=False)[0])


def slant(ax, names: list[str]) -> None:
    """Labels longer than a bar is wide ("bf16 (compiled)") slanted, so that neighbours do not overlap."""
    if any(len(n) > 6 for n in names):
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
            label.set_rotation_mode("anchor")


def bars(ax, rows: list[dict], key: str, title: str, fmt, label_y: dict | None = None) -> None:
    """One bar per mode (``rows``: dicts with mode, status, ``key``); a mode without a value gets its
    status written where the bar would be. ``label_y``: row index -> height for the value label."""
    names = [r["mode"] for r in rows]
    values = [r[key] if r["status"] == "ok" and r[key] is not None else 0.0 for r in rows]
    drawn = ax.bar(names, values, color=[color(n) for n in names])
    slant(ax, names)
    top = max(values) if any(values) else 1.0
    for i, (bar, r, v) in enumerate(zip(drawn, rows, values)):
        ok = r["status"] == "ok" and r[key] is not None
        label = fmt(v) if ok else (r["status"] if r["status"] != "ok"
                                   else "none claimed" if r.get("flags") else "n/a")
        ax.annotate(label, (bar.get_x() + bar.get_width() / 2, (label_y or {}).get(i, v)), xytext=(0, 2),
                    textcoords="offset points", ha="center", va="bottom", fontsize=8, color="black" if ok else BAD)
    ax.set_ylim(0, top * 1.18)
    ax.set_title(title)


def plot(fn, view, title: str, path: str) -> None:
    """A command's ``--plot``: the chart ``fn(view)`` under ``title``, to ``path``; a view with
    nothing to draw (an interrupted run) gets a figure that says so."""
    fig = draw(fn, view)
    if fig is None:
        fig, (ax,) = draw(figure, 6.0, 2.0, 1)
        ax.set_axis_off()
        ax.text(0.5, 0.5, "no run finished: nothing to draw", ha="center", va="center")
    fig.suptitle(title)
    save(fig, path)


def save(fig, path: str, dpi: int = 110) -> None:
    """The figure to ``path`` in the format its extension names (PNG by default), atomically."""
    import matplotlib

    from ..outputs import atomic_path, plot_format

    with atomic_path(path) as tmp, matplotlib.rc_context(STYLE):
        fig.savefig(tmp, format=plot_format(path), dpi=dpi)


def png(fig, dpi: int = 80) -> bytes:
    """The figure as PNG bytes: what a notebook shows as an ``image/png`` output, which JupyterLab
    renders in a notebook it does not trust (its sanitizer drops inline SVG from HTML outputs)."""
    import matplotlib

    buf = io.BytesIO()
    with matplotlib.rc_context(STYLE):
        fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return buf.getvalue()


_ID = re.compile(r'\bid="([^"]+)"')
_REF = re.compile(r'(url\(#|href="#)([^)"]+)')


def svg(fig, prefix: str, label: str) -> str:
    """The figure as an inline ``<svg>`` element: no XML prologue, no metadata, ids prefixed (so
    several charts can share a page), text kept as text."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({**STYLE, "svg.hashsalt": prefix}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.DOTALL)
    text = _ID.sub(lambda m: f'id="{prefix}-{m.group(1)}"', text)
    text = _REF.sub(lambda m: f"{m.group(1)}{prefix}-{m.group(2)}", text)
    # size from CSS (the viewBox keeps the aspect ratio); say what the chart is for screen readers
    text = re.sub(r'<svg ([^>]*?)width="([\d.]+)pt" height="([\d.]+)pt"',
                  lambda m: (f'<svg {m.group(1)}class="chart" role="img" aria-label="{_attr(label)}" '
                             f'style="max-width:{float(m.group(2)) * 4 / 3:.0f}px"'), text, count=1)
    return text.strip()


def _attr(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
