"""Where bench and the doctor disagree, in one rule for the terminal and the report page.

The doctor measures a mode on its own small ops (a matmul, a convolution, two small training
steps); bench measures the user's workload. When the two answer the question "which mode is
fastest here?" differently, ``ampkit bench`` ends with one line naming both and what differs
(:func:`disagreements`), and the report page says the same in words
(:mod:`ampkit.report.reconcile`). The rule reads verdict words, never a point estimate alone:

- the doctor recommends a low-precision mode R and bench did not measure R *faster* than fp32 on
  its workload (slower, no measurable difference, a small difference): they disagree, since the
  doctor's recommendation is a claim that R is faster;
- the doctor recommends fp32 and bench measured another mode *faster*;
- the doctor calls a mode *slower* and bench measured it *faster*.

Agreeing documents add nothing. The reasons, each only where it was measured: the thread counts
when they differ (:mod:`ampkit.threads`), the doctor's ``speedup_by_size`` at this workload's matmul
size (known from ``--explain``'s profile), the ``--explain`` categories that grew (casts, ...), else
a pointer to ``--explain``.

Both sides are plain dicts, so that a document read back and a run just made go through the same
code: the doctor's ``{"recommended", "modes": {mode: {"verdict", "speedup", "training_speedup",
"speedup_by_size"}}, "threads"}`` (the shape of an :mod:`ampkit.auto_cache` entry), and bench rows
``{"mode", "status", "flags", "speedup", "speedup_ci", "speedup_verdict", "explanation", "matmuls"}``.
"""

from __future__ import annotations

import math

from ..stats import ratio_text

#: a row without verdict words (an older one-run document) reads slower/faster beyond these
_SLOWER, _FASTER = 1 / 1.10, 1.10
_CATEGORIES = ("casts", "matmul_conv", "elementwise_norm", "optimizer", "loss_scaling", "other", "host_idle")


def bench_says(row: dict) -> str | None:
    """A bench row's verdict against fp32 (faster, slower, no measurable difference, small
    difference), None for a row that claims no speedup (failed, flagged, emulated)."""
    if row.get("status") != "ok" or row.get("flags") or row.get("speedup") is None:
        return None
    verdict = row.get("speedup_verdict")
    if verdict and verdict != "baseline":
        return verdict
    if verdict is None and not row.get("speedup_ci"):  # one run without an interval: only a clear ratio counts
        return "slower" if row["speedup"] < _SLOWER else "faster" if row["speedup"] > _FASTER else None
    return None


def _x(v) -> str:
    return f"{ratio_text(v)}x" if v < 10 else f"{v:.0f}x"


def _measured(row: dict) -> str:
    ci = row.get("speedup_ci")
    return _x(row["speedup"]) + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "") + " fp32"


def _doctor_figures(m: dict) -> str:
    parts = [f"{what} {_x(m[key])}" for what, key in (("matmul/conv", "speedup"), ("training step", "training_speedup"))
             if isinstance(m.get(key), (int, float))]
    return ", ".join(parts) + " fp32" if parts else "measured"


def _threads(n) -> str:
    return f"{n} thread" + ("" if n == 1 else "s")


def matmul_size(rows: list[dict]) -> float | None:
    """The time-weighted size of the workload's matmuls, from any row's ``--explain`` profile."""
    from .explain import representative_size

    for row in rows:
        rep = representative_size(row.get("matmuls") or [])
        if rep is not None:
            return rep[0]
    return None


def _size_reason(mode: str, table, size: float | None) -> str | None:
    if not isinstance(table, dict):
        return None
    try:
        points = {int(n): float(x) for n, x in table.items() if isinstance(x, (int, float))}
    except (TypeError, ValueError):  # a foreign table in an otherwise valid document
        return None
    if not points:
        return None
    cite = ", ".join(f"{_x(points[n])} at {n}²" for n in sorted(points))
    if size is None:
        return (f"the doctor's matmul gains {mode} {cite}; `ampkit bench --explain` names this workload's matmul "
                "sizes and where its step's time goes")
    near = min(points, key=lambda n: abs(math.log(n) - math.log(max(size, 1.0))))
    return (f"size: this workload's matmuls are about {size:.0f} (time-weighted), where the doctor measured {mode} "
            f"{_x(points[near])} at {near}² (its table: {cite}), and matmuls are only part of a step")


def _explain_reason(row: dict) -> str | None:
    sentences = [s for s in row.get("explanation") or [] if isinstance(s, str)]
    picked = [s for s in sentences[1:] if s.split(" ", 1)[0].rstrip(":") in _CATEGORIES
              or s.startswith(("the model's", "this CPU", "the GPU", "matmul dimensions", "tf32"))]
    return ("bench's --explain: " + "; ".join(picked[:3])) if picked else None


def _why(mode: str, doctor: dict, rows: list[dict], row: dict | None, threads, size: float | None) -> str:
    reasons = []
    dt = doctor.get("threads")
    if isinstance(dt, int) and isinstance(threads, int) and dt != threads:
        reasons.append(f"the doctor timed on {_threads(dt)}, this bench on {_threads(threads)} (--threads): on a "
                       "shared CPU the count can move a step's time more than the precision does")
    explained = _explain_reason(row) if row else None
    sized = _size_reason(mode, (doctor.get("modes") or {}).get(mode, {}).get("speedup_by_size"), size or matmul_size(rows))
    reasons += [r for r in (sized, explained) if r]
    if not explained and not any(r.get("explanation") for r in rows) and not (sized and "--explain" in sized):
        reasons.append("run `ampkit bench --explain` for a breakdown of why")
    return "; ".join(reasons)


def disagreements(doctor: dict | None, rows: list[dict], workload: str, *, threads: int | None = None,
                  matmul_size: float | None = None) -> list[str]:
    """The sentences for every doctor/bench disagreement ([] when they agree or nothing compares)."""
    return [text for _mode, text in found(doctor, rows, workload, threads=threads, matmul_size=matmul_size)]


def found(doctor: dict | None, rows: list[dict], workload: str, *, threads: int | None = None,
          matmul_size: float | None = None) -> list[tuple[str, str]]:
    """``(mode, sentence)`` for every doctor/bench disagreement: the mode it is about, and the words.
    ``matmul_size``: the workload's time-weighted matmul size where known beside the rows (bench's probe)."""
    if not doctor or not rows:
        return []
    by_mode = {r["mode"]: r for r in rows}
    modes = doctor.get("modes") or {}
    rec = doctor.get("recommended")
    out = []
    says = {m: bench_says(r) for m, r in by_mode.items() if m != "fp32"}
    measured = {m: s for m, s in says.items() if s is not None}
    if not measured:
        return []
    where = f" on {_threads(doctor['threads'])}" if isinstance(doctor.get("threads"), int) else ""
    if rec and rec != "fp32" and rec in measured and measured[rec] != "faster":
        ok = [r for r in rows if r["mode"] == "fp32" or r["mode"] in measured]
        fastest = max(ok, key=lambda r: 1.0 if r["mode"] == "fp32" else r["speedup"])
        best = "" if fastest["mode"] == rec else f"; bench's fastest: {fastest['mode']}" + (
            "" if fastest["mode"] == "fp32" else f" {_measured(fastest)}")
        out.append((rec, f"the doctor recommends {rec} ({_doctor_figures(modes.get(rec, {}))} on its own small ops{where}), but "
                   f"bench {workload} measured {rec} {_measured(by_mode[rec])}: {measured[rec]}{best}; "
                   + _why(rec, doctor, rows, by_mode[rec], threads, matmul_size)))
    faster = [m for m, s in measured.items() if s == "faster"]
    if rec == "fp32" and faster:
        m = max(faster, key=lambda k: by_mode[k]["speedup"])
        out.append((m, f"the doctor recommends fp32 ({m}: {_doctor_figures(modes.get(m, {}))} on its own small ops{where}), "
                   f"but bench {workload} measured {m} faster: {_measured(by_mode[m])}; "
                   + _why(m, doctor, rows, by_mode[m], threads, matmul_size)))
    for m in faster:
        if m != rec and (modes.get(m) or {}).get("verdict") == "slower" and rec != "fp32":
            out.append((m, f"the doctor calls {m} slower ({_doctor_figures(modes[m])} on its own small ops{where}), but "
                       f"bench {workload} measured {m} faster: {_measured(by_mode[m])}; "
                       + _why(m, doctor, rows, by_mode[m], threads, matmul_size)))
    return out


def bench_rows(results) -> list[dict]:
    """BenchRows (a run just made) as the dicts :func:`disagreements` reads."""
    return [{"mode": r.mode, "status": r.status, "flags": list(r.flags or []), "speedup": r.speedup_vs_fp32,
             "speedup_ci": r.speedup_ci, "speedup_verdict": r.speedup_verdict, "explanation": r.explanation,
             "matmuls": (r.explain_detail or {}).get("matmuls")} for r in results if not getattr(r, "compiled", False)]
