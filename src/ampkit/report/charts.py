"""The report's charts, drawn with matplotlib (its object API: no pyplot, no global state).

Each chart is a :class:`matplotlib.figure.Figure`; :func:`svg` turns one into an inline ``<svg>``
element for the HTML page (text kept as text, element ids prefixed per chart so several charts
can share a page), :func:`png` writes one as a PNG for the Markdown report.
"""

from __future__ import annotations

import io
import math
import re

from ..render.output import MODE_COLORS, OTHER_COLOR
from .model import AuditView, BenchView, ParityView

__all__ = ["MODE_COLORS", "color", "figure_for", "svg", "png"]
_OTHER = OTHER_COLOR
BAD = "#d62728"
_RC = {"text.parse_math": False, "svg.fonttype": "none", "svg.hashsalt": "ampkit-report", "font.size": 9, "axes.titlesize": 10,
       "axes.spines.top": False, "axes.spines.right": False}


def color(mode: str) -> str:
    return MODE_COLORS.get(mode, _OTHER)


def _figure(width: float, height: float, ncols: int):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def _bars(ax, rows: list[dict], key: str, title: str, fmt, label_y: dict | None = None) -> None:
    """One bar per mode; a mode without a value gets its status written where the bar would be.
    ``label_y``: row index -> height for the value label (above a whisker, say)."""
    names = [r["mode"] for r in rows]
    values = [r[key] if r["status"] == "ok" and r[key] is not None else 0.0 for r in rows]
    bars = ax.bar(names, values, color=[color(n) for n in names])
    top = max(values) if any(values) else 1.0
    for i, (bar, r, v) in enumerate(zip(bars, rows, values)):
        ok = r["status"] == "ok" and r[key] is not None
        label = fmt(v) if ok else (r["status"] if r["status"] != "ok"
                                   else "none claimed" if r.get("flags") else "n/a")
        ax.annotate(label, (bar.get_x() + bar.get_width() / 2, (label_y or {}).get(i, v)), xytext=(0, 2),
                    textcoords="offset points", ha="center", va="bottom", fontsize=8, color="black" if ok else BAD)
    ax.set_ylim(0, top * 1.18)
    ax.set_title(title)


def bench_figure(view: BenchView):
    rows = view.rows
    panels = ["throughput", "speedup", "memory"] + (["max_batch"] if view.has_max_batch else [])
    fig, axes = _figure(2.6 * len(panels), 2.6, len(panels))
    for ax, panel in zip(axes, panels):
        if panel == "throughput":
            _bars(ax, rows, "samples_per_s", "throughput (samples/s)", lambda v: f"{v:,.0f}")
        elif panel == "memory":
            mib = [dict(r, peak_mib=r["peak_memory_bytes"] / 2**20 if r["peak_memory_bytes"] is not None else None)
                   for r in rows]
            _bars(ax, mib, "peak_mib", "peak memory (MiB)", lambda v: f"{v:,.0f}")
        elif panel == "max_batch":
            mb = [dict(r, max_batch_size=r["max_batch_size"] if isinstance(r["max_batch_size"], (int, float)) else None)
                  for r in rows]
            _bars(ax, mb, "max_batch_size", "max batch size", lambda v: f"{v:,.0f}")
        else:
            _speedup(ax, rows)
    return fig


def _speedup(ax, rows: list[dict]) -> None:
    """Speedup vs fp32 with its confidence interval as a whisker (when the bench ran --repeats)."""
    tops = {i: r["speedup_ci"][1] for i, r in enumerate(rows)
            if r["status"] == "ok" and r["speedup_ci"] and r["speedup"] is not None}
    _bars(ax, rows, "speedup", "speedup vs fp32 (×)", lambda v: f"{v:.2f}×", label_y=tops)
    for i, hi in tops.items():
        r = rows[i]
        lo = r["speedup_ci"][0]
        ax.errorbar([i], [r["speedup"]], yerr=[[max(0.0, r["speedup"] - lo)], [max(0.0, hi - r["speedup"])]],
                    fmt="none", ecolor="black", capsize=4, lw=1)
        ax.set_ylim(0, max(ax.get_ylim()[1], hi * 1.18))
    ax.axhline(1.0, color="black", lw=0.8, ls="--")


def parity_figure(view: ParityView):
    """Test accuracy and train loss per epoch, mean over seeds with a ± std band; after a single
    epoch there is no curve, so each mode is a point with a ± std whisker."""
    from matplotlib.ticker import MaxNLocator

    fig, axes = _figure(8.0, 2.8, 2)
    epochs_n = min((len(r["acc_curve"][0]) for r in view.rows if r["acc_curve"]), default=0)
    for ax, key, title in ((axes[0], "acc_curve", "test accuracy"), (axes[1], "loss_curve", "train loss")):
        rows = [r for r in view.rows if r[key]]
        if epochs_n <= 1:
            for i, r in enumerate(rows):
                (mu,), (sd,) = r[key][0][:1], r[key][1][:1]
                ax.errorbar([i], [mu], yerr=[sd], fmt="o", color=color(r["mode"]), capsize=5, ms=6)
            ax.set_xticks(range(len(rows)))
            ax.set_xticklabels([f"{r['mode']}\n({r['verdict']})" for r in rows])
            ax.set_xlim(-0.6, len(rows) - 0.4)
            ax.set_title(f"{title} after 1 epoch (mean ± std over seeds)")
            continue
        for r in rows:
            mean, std = r[key]
            xs = list(range(1, len(mean) + 1))
            c = color(r["mode"])
            ax.plot(xs, mean, marker="o", ms=3, color=c, label=f"{r['mode']} ({r['verdict']})")
            ax.fill_between(xs, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)],
                            color=c, alpha=0.18, lw=0)
        ax.set_title(f"{title} (mean ± std over seeds)")
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if epochs_n > 1:
        axes[0].legend(fontsize=8, frameon=False)
    return fig


def audit_figure(view: AuditView):
    """Per layer, in execution order: headroom in bits above (forward output, and gradient at the
    loss scale; below 0 overflows), underflow shares below; the first layer with inf/NaN is marked
    in red and labelled."""
    from matplotlib.figure import Figure

    layers = view.layers
    n = max(len(layers), 1)
    fig = Figure(figsize=(min(max(6.5, 0.3 * n + 2), 14.0), 4.8), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    xs = list(range(len(layers)))
    cap = 40.0  # beyond +-40 bits (or infinite: an all-zero tensor) bars are drawn at the cap
    w = 0.4

    def capped(v):
        return cap if v is None else max(-cap, min(cap, v))

    top.bar([x - w / 2 for x in xs], [capped(lay["fwd_headroom"]) for lay in layers], w, color=color(view.mode),
            label="forward output")
    top.bar([x + w / 2 for x in xs], [capped(lay["grad_headroom"]) for lay in layers], w, color="#8c564b",
            label="gradient (at the loss scale)")
    top.axhline(0, color="black", lw=0.8)
    top.set_ylabel("headroom\n(log2 bits)")
    fig.suptitle(f"{view.workload} in {view.mode}, loss scale {view.loss_scale:g}: per layer in execution order",
                 fontsize=10)
    top.legend(fontsize=7, frameon=False, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncols=2, borderaxespad=0)
    bottom.bar([x - w / 2 for x in xs], [lay["fwd_underflow"] * 100 for lay in layers], w,
               color=color(view.mode), label="forward underflow")
    bottom.bar([x + w / 2 for x in xs], [lay["grad_underflow"] * 100 for lay in layers], w,
               color="#8c564b", label="gradient underflow")
    bottom.axhline(5, color="black", lw=0.6, ls=":")
    bottom.set_ylabel("underflow (%)")
    bottom.set_ylim(0, max([5.0] + [max(lay["fwd_underflow"], lay["grad_underflow"]) * 100 for lay in layers]) * 1.2)
    for lay in layers:
        if lay["first"]:
            for ax in (top, bottom):
                ax.axvspan(lay["index"] - 0.5, lay["index"] + 0.5, color=BAD, alpha=0.15, lw=0)
                ax.axvline(lay["index"], color=BAD, lw=1.2, ls="--")
            top.annotate(f"first inf/NaN: {lay['name']} ({view.first['phase']})", (lay["index"], 0.97),
                         xycoords=("data", "axes fraction"), xytext=(-6, 0), textcoords="offset points",
                         color=BAD, fontsize=8, va="top", ha="right", fontweight="bold")
    step = max(1, math.ceil(len(layers) / 40))
    bottom.set_xticks(xs[::step])
    bottom.set_xticklabels([_short(lay["name"]) for lay in layers[::step]], rotation=60, ha="right", fontsize=7)
    for tick, lay in zip(bottom.get_xticklabels(), layers[::step]):
        if lay["first"]:
            tick.set_color(BAD)
            tick.set_fontweight("bold")
    return fig


def _short(name: str, limit: int = 22) -> str:
    return name if len(name) <= limit else "…" + name[-(limit - 1):]


# ---------------------------------------------------------------- output
_ID = re.compile(r'\bid="([^"]+)"')
_REF = re.compile(r'(url\(#|href="#)([^)"]+)')


def svg(fig, prefix: str, label: str) -> str:
    """The figure as an inline ``<svg>`` element: no XML prologue, no metadata, ids prefixed."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({**_RC, "svg.hashsalt": prefix}):
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


def png(fig, path: str, dpi: int = 110) -> None:
    """Write the figure as a PNG, atomically (a unique temporary file in the folder, then a rename)."""
    import os
    import tempfile

    import matplotlib

    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".ampkit-", suffix=".png")
    try:
        with os.fdopen(fd, "wb") as fh, matplotlib.rc_context(_RC):
            fig.savefig(fh, format="png", dpi=dpi)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _attr(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")


def figure_for(view):
    """The chart of one view (None when there is nothing to draw), built under the report's style."""
    import matplotlib

    with matplotlib.rc_context(_RC):
        if isinstance(view, BenchView):
            return bench_figure(view) if view.rows else None
        if isinstance(view, ParityView):
            return parity_figure(view) if view.has_curves else None
        if isinstance(view, AuditView):
            return audit_figure(view) if view.layers else None
    return None
