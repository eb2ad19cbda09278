"""``ampkit plan`` on the terminal and on the report page: what was tried, each figure, the plan."""

from __future__ import annotations

from dataclasses import dataclass

from rich.markup import escape
from rich.table import Table

from .output import PageView, check_per, csv_of, fmt, head, one_section, verdict_row

__all__ = ["render", "rows", "PlanView", "page_view", "verdicts", "figure"]

STATUS_WORDS = {"accepted": "faster than fp32 and not worse", "none_faster": "no mode is faster than fp32 here",
                "none_trains": "no mode trains finite and equivalent: plain fp32",
                "not_measured": "no candidate was measured: plain fp32, no verdict"}


def _ci(ci) -> str:
    return "—" if not ci or None in ci else f"{ci[0]:.2f}-{ci[1]:.2f}x"


def _tried(tried: list[dict]) -> list[dict]:
    """One printable row per candidate tried."""
    out = []
    for t in tried:
        plan = t.get("plan") or {}
        kept = ", ".join(f"{p}:{m}" for p, m in (plan.get("modules") or {}).items()) or ("none" if plan else "—")
        price = t.get("island_price")
        out.append({"mode": t.get("mode", "?"), "kept": kept,
                    "speedup": "—" if t.get("speedup") is None else f"{t['speedup']:.2f}x",
                    "interval": _ci(t.get("speedup_ci")), "verdict": t.get("speedup_verdict") or "—",
                    "price": "—" if price is None else f"{price:.2f}x",
                    "finite": "—" if t.get("finite") is None else ("yes" if t["finite"] else "no"),
                    "parity": t.get("parity") or "—", "accepted": bool(t.get("accepted")), "why": t.get("why") or ""})
    return out


def render(report, con) -> None:
    table = Table(title=escape(f"ampkit plan — {report.workload} ({report.framework or report.plan.framework}) on "
                               f"{report.device}  ·  {STATUS_WORDS.get(report.status, report.status)}"), title_justify="left")
    for c in ("mode", "kept apart", "speedup vs fp32", "95% interval", "bench verdict", "island price", "finite",
              "parity vs fp32", "chosen"):
        table.add_column(c, justify="left" if c in ("mode", "kept apart", "bench verdict", "parity vs fp32") else "right")
    for r in _tried(report.tried):
        table.add_row(escape(r["mode"]), escape(r["kept"]), r["speedup"], r["interval"], escape(r["verdict"]), r["price"],
                      r["finite"], escape(r["parity"]), "[bold green]yes[/]" if r["accepted"] else "")
    con.print(table)
    for r in _tried(report.tried):
        if r["why"] and not r["accepted"]:
            con.print(f"  {r['mode']}: {r['why']}", markup=False, highlight=False)
    if report.order:
        figures = ", ".join(f"{o['mode']} {fmt(o.get('samples_per_s'), '.4g')}/s" for o in report.order)
        con.print(f"measured here (samples/s): {figures}", markup=False, highlight=False)
    if report.note:
        con.print(f"note: {report.note}", markup=False, highlight=False)
    if report.out:
        con.print(f"plan written to {report.out}: {report.plan.default}"
                  + (f", kept apart: {', '.join(f'{p} in {m}' for p, m in report.plan.modules.items())}"
                     if report.plan.modules else ", no module kept apart"), markup=False, highlight=False)
    if report.use:
        con.print(f"  use it: {report.use}", markup=False, highlight=False)


@dataclass
class PlanView(PageView):
    workload: str
    device: str
    status: str
    default: str
    modules: dict
    use: str


def page_view(report, doc=None) -> PlanView:
    return PlanView(doc, _tried(report.tried), report.workload or "?", report.device, report.status,
                    report.plan.default, dict(report.plan.modules), report.use or "")


def verdicts(view: PlanView) -> list[dict]:
    word = ("pass" if view.status == "accepted" else "skip" if view.status == "none_faster" else
            "not_measured" if view.status == "not_measured" else "fail")
    kept = ", ".join(view.modules) or "no island"
    return [verdict_row(f"plan {view.workload}", word, f" ({view.default}, {kept}: {STATUS_WORDS.get(view.status, '')})")]


def figure(view: PlanView):
    return None

# ---------------------------------------------------------------- the notebook and to_pandas()
sections, headline = one_section("plan")


def line(view: PlanView) -> str:
    kept = ", ".join(f"{p} {m}" for p, m in view.modules.items())
    return f"plan {view.workload} on {view.device}: {view.default}" + (f" ({kept})" if kept else "") + f"; {view.status}"


def rows(result, per: str | None = None) -> list[dict]:
    """``to_pandas()``: one row per candidate tried, with its figures."""
    check_per(per)
    doc = result.to_dict()
    return [{"workload": doc.get("workload"), **head(doc), **t} for t in doc.get("tried") or []]


to_csv = csv_of(rows)
