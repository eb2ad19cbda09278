"""The per-module chart of an ``ampkit audit --what-if`` document (the report's page): one panel per
predicted format, modules in execution order, the ones each format would keep out marked in red."""

from __future__ import annotations

import math

from . import charts

CAP = 40.0  # headroom bars beyond +-40 bits are drawn at the cap


def _headroom(amax, scale=1.0) -> float:
    if not amax:
        return CAP
    return max(-CAP, min(CAP, math.log2(65504.0 / (amax * scale))))


def _short(name: str, limit: int = 22) -> str:
    name = name or "(model)"
    return name if len(name) <= limit else "…" + name[-(limit - 1):]


def whatif_figure(view):
    """fp16: forward and gradient headroom (at the document's loss scale); bf16: the bits of each
    output's spread its rounding keeps; fp8: share of each matmul input lost under tensorwise scaling and the best
    finer scaling. None without modules."""
    from matplotlib.figure import Figure

    doc = view.what_if_doc
    panels = [f for f in ("fp16", "bf16", "fp8") if f in doc and doc[f].get("modules")]
    if not panels:
        return None
    n = max(len(doc[f]["modules"]) for f in panels)
    fig = Figure(figsize=(min(max(6.5, 0.3 * n + 2), 14.0), 2.4 * len(panels) + 0.8), layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    fig.suptitle(f"what-if for {view.workload}: per module, in execution order (red: keep out of the format)",
                 fontsize=10)
    for ax, fmt in zip(axes, panels):
        p = doc[fmt]
        rows = p["modules"]
        keep = set(p.get("keep_in_fp32") or [])
        xs = list(range(len(rows)))
        # red is exactly what the verdict names (its keep_in_fp32), each labelled with why (issue #46): a reason
        # the bar's own measure does not show -- an overflow inside its code, underflowing gradients -- is written
        bad = [r["name"] in keep for r in rows]
        if fmt == "fp16":
            scale = float(p.get("loss_scale") or 1.0)
            ax.bar([x - 0.2 for x in xs], [_headroom(r.get("fwd_amax")) for r in rows], 0.4,
                   color=[charts.BAD if b else charts.color("fp16") for b in bad], label="forward output")
            ax.bar([x + 0.2 for x in xs], [_headroom(r.get("grad_amax"), scale) for r in rows], 0.4,
                   color="#8c564b", label=f"gradient at loss scale {scale:g}")
            ax.axhline(0, color="black", lw=0.8)
            ax.set_ylabel(f"fp16 headroom\n(bits) — {p['verdict']}", fontsize=8)
        elif fmt == "bf16":
            # bits of each output's spread that survive bf16's rounding: -log2(noise / spread), 16 when none is lost
            vals = [min(16.0, -math.log2(r["noise_to_spread"])) if r.get("noise_to_spread") else 16.0 for r in rows]
            ax.bar(xs, vals, 0.6, color=[charts.BAD if b else charts.color("bf16") for b in bad],
                   label="bits of the output's spread kept")
            ax.axhline(4, color="black", lw=0.6, ls=":")
            ax.set_ylabel(f"bf16 bits kept\n— {p['verdict']}", fontsize=8)
        else:
            tw = [100 * ((r["input_e4m3"].get("tensorwise") or {}).get("lost_frac") or 0) for r in rows]
            best = [100 * min(((r["input_e4m3"].get(s) or {}).get("lost_frac") or 0)
                              for s in ("rowwise", "channelwise", "block32")) for r in rows]
            ax.bar([x - 0.2 for x in xs], tw, 0.4, color=[charts.BAD if b else "#7f7f7f" for b in bad],
                   label="input lost, tensorwise e4m3")
            ax.bar([x + 0.2 for x in xs], best, 0.4, color="#2ca02c", label="best finer scaling")
            ax.axhline(5, color="black", lw=0.6, ls=":")
            ax.set_ylabel(f"fp8 lost (%)\n— {p['verdict']}", fontsize=8)
        for x, r, b, bar in zip(xs, rows, bad, ax.patches[:len(rows)]):
            if b:
                why = ", ".join(r.get("reasons") or ["kept"]) + (f" ({r['inner_op']})" if r.get("inner_op")
                                                                 and "overflow" in (r.get("reasons") or []) else "")
                ax.annotate(why, (x, max(bar.get_height(), 0)), xytext=(0, 2), textcoords="offset points", ha="center",
                            va="bottom", fontsize=7, color=charts.BAD, rotation=90)
        ax.legend(fontsize=7, frameon=False, loc="upper right")
        step = max(1, math.ceil(len(rows) / 40))
        ax.set_xticks(xs[::step])
        ax.set_xticklabels([_short(r["name"]) for r in rows[::step]], rotation=60, ha="right", fontsize=7)
    return fig
