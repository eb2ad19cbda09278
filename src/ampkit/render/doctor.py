"""How a doctor report is shown: the console header and table, and the report page's rows and verdicts."""

from __future__ import annotations

from dataclasses import dataclass

from rich.table import Table

from ..cpu import cpu_features
from ..stats import ratio_text
from .output import PageView, check_per, csv_of, finite, fmt_bytes, one_section, verdict_row

_VERDICT_STYLE = {"recommended": "bold green", "usable": "green", "slower": "yellow",
                  "unsupported": "dim", "broken": "bold red"}


def keras_detail(env: dict) -> str | None:
    """``Keras 3.15.1; tf_keras 2.21.0; tf.keras is Keras 3``: the Kerases here, and which ``tf.keras`` means."""
    if not env.get("keras_version"):
        return None
    parts = [f"Keras {env['keras_version']}"]
    if env.get("tf_keras_version"):
        parts.append(f"tf_keras {env['tf_keras_version']}")
    if env.get("keras_flavour"):
        parts.append("tf.keras is " + ("tf_keras (TF_USE_LEGACY_KERAS)" if env["keras_flavour"] == "tf_keras" else "Keras 3"))
    return "; ".join(parts)


def framework_line(env: dict) -> str:
    """``torch 2.14.1 (cpu build)`` or ``tensorflow 2.21.0 (Keras 3.15.1; tf_keras 2.21.0; tf.keras is Keras 3)``."""
    framework = env.get("framework") or "?"
    detail = f"{env.get('torch_build')} build" if framework == "torch" else keras_detail(env)
    return f"{framework} {env.get('framework_version')}" + (f" ({detail})" if detail else "")


def render_variants(report, con) -> None:
    """Self-tests of the framework's other builds (TensorFlow: Keras 2 as tf_keras), one line per mode."""
    for variant in getattr(report, "variants", {}).values():
        if variant.get("deferred"):
            con.print(f"{variant.get('label')}: {variant['deferred']}", markup=False, highlight=False)
            continue
        con.print(f"{variant.get('label')} self-test (its own mixed-precision API):")
        for mode, v in variant.get("modes", {}).items():
            style = {"pass": "green", "fail": "bold red"}.get(v.get("selftest"), "dim")
            con.print(f"  {mode:5} [{style}]{v.get('selftest')}[/]  {v.get('detail', '')}")


def _speedup(x, ci) -> str:
    if x is None:
        return "—"
    return f"{ratio_text(x)}x" + (f" [{ratio_text(ci[0])}, {ratio_text(ci[1])}]" if ci else "")


def _verdict_cell(m, style: str) -> str:
    """The verdict as shown; a mode the hardware lacks that runs emulated (fp8) says so."""
    if m.emulated and m.selftest == "pass":
        return "[green]working (emulated)[/]"
    return f"[{style}]{m.verdict}[/]" if style else m.verdict


def render(report, con) -> None:
    env = report.environment
    cpu = env.get("cpu", {})
    lines = [
        f"ampkit {env.get('ampkit')}  ·  python {env.get('python')}  ·  {env.get('platform')}",
        framework_line(env)
        + (f"  ·  CUDA {env['cuda_runtime']}" if env.get("cuda_runtime") else "")
        + (f"  ·  cuDNN {env['cudnn']}" if env.get("cudnn") else "")
        + (f"  ·  driver {env['driver_version']}" if env.get("driver_version") else ""),
    ]
    for g in env.get("gpus", []):
        memory = f"  {fmt_bytes(g['memory_total_bytes'])}" if g.get("memory_total_bytes") else ""
        lines.append(f"GPU {g['index']}: {g['name']}  cc {g.get('compute_capability')}{memory}")
    threads = f", torch threads {cpu['threads']}" if cpu.get("threads") else ""
    kernels = f"  ·  torch kernels {cpu['torch_cpu_capability']}" if cpu.get("torch_cpu_capability") else ""
    lines.append(f"CPU: {cpu.get('model')}  ·  {cpu.get('logical_cpus')} logical CPUs{threads}"
                 f"  ·  ISA: {', '.join(cpu_features(cpu)) or 'none of note'}{kernels}")
    for line in lines:
        con.print(line)
    table = Table(title=f"ampkit doctor — {report.framework} on {report.device}", title_justify="left")
    for col in ("mode", "supported", "self-test", "matmul/conv", "training", "accel.", "verdict"):
        table.add_column(col, no_wrap=True)
    table.add_column("reason", overflow="fold", min_width=24)
    for mode, m in report.modes.items():
        style = _VERDICT_STYLE.get(m.verdict, "")
        table.add_row(mode, "yes" if m.supported else "no", m.selftest,
                      _speedup(m.speedup, m.speedup_ci if mode != "fp32" else None),
                      _speedup(m.training_speedup, m.training_speedup_ci if mode != "fp32" else None),
                      {True: "yes", False: "no", None: "—"}[m.accelerated],
                      _verdict_cell(m, style), m.reason)
    con.print(table)
    render_variants(report, con)
    rounds = max((m.rounds or 0) for m in report.modes.values())
    if rounds:
        con.print(f"[dim]speedups vs fp32 with 95% intervals over up to {rounds} interleaved rounds[/]")
    for text in footer(report):
        con.print(text, markup=False, highlight=False, style="dim")
    con.print(f"recommended: [bold]{report.recommended or 'none'}[/] — {report.reason}")
    if report.elapsed_s is not None:
        con.print(f"[dim]doctor took {report.elapsed_s:.1f} s[/]")


def footer(report) -> list[str]:
    """The table's footer: the thread count it timed with, and every verdict word the table shows."""
    from ..doctor.verdicts import VERDICT_WORDS
    from ..threads import footer as threads_footer

    out = [t for t in [threads_footer(report.environment.get("cpu"), accelerator=report.device.startswith(("cuda", "GPU")))]
           if t and not report.quick]
    shown = " ".join([_verdict_cell(m, "").replace("[green]", "").replace("[/]", "") + " " + m.reason
                      for m in report.modes.values()])
    words = [f"{w}{' threshold' if w == 'within the' else ''}: {d}" for w, d in VERDICT_WORDS.items() if w in shown]
    return out + (["verdicts — " + "; ".join(words)] if words else [])


# ---------------------------------------------------------------- the report's page
@dataclass
class DoctorView(PageView):
    """A doctor document on the report's page: one row per mode."""

    recommended: str
    reason: str
    device: str
    quick: bool


def page_view(report, doc=None) -> DoctorView:
    rows = []
    for mode, m in report.modes.items():
        ci = m.speedup_ci if isinstance(m.speedup_ci, list) and len(m.speedup_ci) == 2 else None
        rows.append({"mode": mode, "supported": m.supported, "selftest": m.selftest, "accelerated": m.accelerated,
                     "speedup": finite(m.speedup), "speedup_ci": [finite(x) for x in ci] if ci else None,
                     "training_speedup": finite(m.training_speedup),
                     "rounds": m.rounds, "verdict": m.verdict, "reason": m.reason or "",
                     "speedup_by_size": m.speedup_by_size if isinstance(m.speedup_by_size, dict) else None})
    return DoctorView(doc, rows, report.recommended, report.reason, report.device, bool(report.quick))


def _measured(r: dict) -> str:
    """The figures behind a verdict, each named: a verdict may follow the training steps while the
    kernels went the other way ("slower (kernels 1.30×, training 0.05×)")."""
    parts = [f"{what} {r[key]:.2f}×" for what, key in (("kernels", "speedup"), ("training", "training_speedup"))
             if r.get(key) is not None]
    if len(parts) == 1 and r.get("speedup") is not None:
        return f" ({r['speedup']:.2f}×)"
    return f" ({', '.join(parts)})" if parts else ""


def verdicts(view: DoctorView) -> list[dict]:
    rec = view.recommended or "none: not measured"
    return [{"key": "doctor: recommended", "text": rec, "tone": "info"}] + [
        verdict_row(f"doctor: {r['mode']}", r["verdict"], _measured(r)) for r in view.rows if r["mode"] != "fp32"]


def figure(view: DoctorView) -> None:
    """The doctor's page section is its table: no chart."""
    return None


# ---------------------------------------------------------------- the notebook and to_pandas()
def sections(result) -> list[tuple[str, object, str | None]]:
    """A ``--framework all`` doctor has a section per framework."""
    if isinstance(getattr(result, "reports", None), dict):
        return [("doctor", r, name) for name, r in result.reports.items()]
    return [("doctor", result, None)]


def line(view: DoctorView) -> str:
    others = ", ".join(f"{r['mode']} {r['verdict']}" for r in view.rows if r["mode"] != view.recommended)
    said = f"recommended {view.recommended}" if view.recommended else f"recommended none ({_head(view.reason)})"
    return f"doctor {view.doc.framework} on {view.device}: {said}" + (f"; {others}" if others else "")


def _head(reason: str | None, limit: int = 60) -> str:
    """A reason's first clause for a one-line repr (the table and the report keep all of it):
    ``not measured: --quick times nothing ...`` -> ``not measured``."""
    head = str(reason or "no reason given")
    for stop in (":", ";", " ("):
        head = head.split(stop, 1)[0]
    return head if len(head) <= limit else head[:limit].rsplit(" ", 1)[0] + "…"


def rows(result, per: str | None = None) -> list[dict]:
    """``to_pandas()``: one row per (framework, mode)."""
    check_per(per)
    doc = result.to_dict()
    parts = doc.get("frameworks") or {doc.get("framework"): doc}
    return [{"framework": fw, "device": part.get("device"), "mode": mode, **m, "recommended": part.get("recommended") == mode}
            for fw, part in parts.items() for mode, m in (part.get("modes") or {}).items()]


to_csv, headline = csv_of(rows), one_section("doctor")[1]  # a doctor says itself in its sections' lines
