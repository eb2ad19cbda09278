"""From loaded documents to what the page shows: environments, their differences, per-command views.

Documents are grouped by environment: the fields that make one machine or image differ from
another (framework and its version, CUDA, cuDNN, driver, GPU, CPU and its low-precision ISA,
Python, platform, ampkit). Fields that change from run to run on one machine (free memory,
the device a command ran on) are left out of the identity, so a doctor, a bench and an audit
run on one machine land in one group.
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass, field

from .._version import __version__
from .load import Document, finite

#: the CPU features that decide whether bf16/fp16 run natively on a CPU
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_fp16")
DOCTOR_MODES = ("fp32", "tf32", "fp16", "bf16", "fp8")
GOOD = {"recommended", "usable", "pass", "baseline", "ok", "clean"}
BAD = {"broken", "fail", "error", "oom", "nonfinite"}
MUTED = {"unsupported", "skip"}


def _cudnn(v) -> str | None:
    """torch reports cuDNN as an integer (9.x: 91002 = 9.10.2; 8.x: 8902 = 8.9.2); TF as a string."""
    if v is None or v == "":
        return None
    if isinstance(v, int) and not isinstance(v, bool):
        if v >= 10000:
            return f"{v // 10000}.{v % 10000 // 100}.{v % 100}"
        return f"{v // 1000}.{v % 1000 // 100}.{v % 100}"
    return str(v)


def _gpus(env: dict) -> str | None:
    names = [g.get("name") for g in env.get("gpus") or [] if isinstance(g, dict) and g.get("name")]
    if not names:
        if env.get("compute_capability") and env.get("device_name"):
            return str(env["device_name"])
        return None
    out = []
    for name in dict.fromkeys(names):
        n = names.count(name)
        out.append(f"{n}× {name}" if n > 1 else name)
    return ", ".join(out)


def _driver(env: dict) -> str | None:
    if env.get("driver_version"):
        return str(env["driver_version"])
    for g in env.get("nvml") or []:
        if isinstance(g, dict) and g.get("driver_version"):
            return str(g["driver_version"])
    return None


def _isa(env: dict) -> str | None:
    cpu = env.get("cpu") if isinstance(env.get("cpu"), dict) else {}
    flags = [f for f in ISA_FLAGS if cpu.get(f) is True]
    cap = cpu.get("torch_cpu_capability")
    if not flags and not cap:
        return None
    text = " ".join(flags) if flags else "none of " + "/".join(ISA_FLAGS[:3])
    return f"{text} (torch: {cap})" if cap else text


def _framework(env: dict, doc: Document | None = None) -> str:
    fw = env.get("framework") or (doc.framework if doc else None) or "?"
    text = f"{fw} {env.get('framework_version') or ''}".strip()
    if env.get("keras"):  # the Keras that ran ("keras 3.15.1" or "tf_keras 2.21.0"), where the document says
        text += f", {env['keras']}"
    elif env.get("keras_version"):
        text += f", keras {env['keras_version']}"
    return text


#: (key, label, getter) — the rows of the environment table, in order; every one is part of the identity
ENV_FIELDS = (
    ("framework", "framework", lambda e: _framework(e)),
    ("cuda", "CUDA", lambda e: e.get("cuda_runtime")),
    ("cudnn", "cuDNN", lambda e: _cudnn(e.get("cudnn"))),
    ("driver", "driver", _driver),
    ("gpu", "GPU", _gpus),
    ("cc", "compute capability", lambda e: e.get("compute_capability") if _gpus(e) else None),
    ("cpu", "CPU", lambda e: (e.get("cpu") or {}).get("model") if isinstance(e.get("cpu"), dict) else None),
    ("isa", "CPU ISA", _isa),
    ("python", "Python", lambda e: e.get("python")),
    ("platform", "platform", lambda e: e.get("platform")),
    ("ampkit", "ampkit", lambda e: e.get("ampkit")),
)


def environment_fields(doc: Document) -> dict[str, str]:
    env = doc.environment or {}
    out = {}
    for key, _label, get in ENV_FIELDS:
        try:
            value = get(env)
        except (AttributeError, TypeError, ValueError):  # a foreign shape inside an otherwise valid document: show it as unknown
            value = None
        out[key] = "—" if value in (None, "") else str(value)
    if out["framework"].startswith("?"):
        out["framework"] = doc.framework
    if out["ampkit"] == "—":
        out["ampkit"] = str(doc.data.get("ampkit_version") or "—")
    return out


# ---------------------------------------------------------------- per-command views
@dataclass
class DoctorView:
    doc: Document
    rows: list[dict]
    recommended: str
    reason: str
    device: str
    quick: bool


@dataclass
class BenchView:
    doc: Document
    rows: list[dict]
    workload: str
    device: str
    has_ci: bool
    has_max_batch: bool
    note: str | None
    chart: str = ""       # inline SVG, filled by the renderer
    chart_id: str = ""


@dataclass
class ParityView:
    doc: Document
    rows: list[dict]
    dataset: str
    device: str
    tolerance: float | None
    alpha: float | None
    epochs: int | None
    has_curves: bool
    chart: str = ""
    chart_id: str = ""


@dataclass
class AuditView:
    doc: Document
    workload: str
    mode: str
    device: str
    loss_scale: float
    steps: int | None
    first: dict | None
    findings: list[dict]
    layers: list[dict]
    suggested_loss_scale: float | None
    chart: str = ""
    chart_id: str = ""

    @property
    def summary(self) -> str:
        """"clean", or the findings counted by severity (never "clean" with one)."""
        return findings_summary(self.findings)[0]

    @property
    def summary_tone(self) -> str:
        return findings_summary(self.findings)[1]


def doctor_view(doc: Document) -> DoctorView:
    d = doc.data
    rows = []
    for mode, m in d["modes"].items():
        ci = m.get("speedup_ci") if isinstance(m.get("speedup_ci"), list) and len(m["speedup_ci"]) == 2 else None
        rows.append({"mode": mode, "supported": m["supported"], "selftest": m["selftest"],
                     "accelerated": m.get("accelerated"), "speedup": finite(m.get("speedup")),
                     "speedup_ci": [finite(x) for x in ci] if ci else None, "rounds": m.get("rounds"),
                     "verdict": m["verdict"], "reason": m.get("reason") or ""})
    return DoctorView(doc, rows, d["recommended"], d["reason"], d["device"], bool(d.get("quick")))


def bench_view(doc: Document) -> BenchView:
    d = doc.data
    rows = []
    for r in d["results"]:
        ci = r.get("speedup_ci")
        ci = [finite(x) for x in ci] if isinstance(ci, list) and len(ci) == 2 else None
        step = r.get("step_ms") if isinstance(r.get("step_ms"), dict) else {}
        rows.append({"mode": r["mode"], "status": r["status"], "error": r.get("error"),
                     "resolved_from": r.get("resolved_from"), "batch_size": r.get("batch_size"),
                     "samples_per_s": finite(r.get("samples_per_s")), "p50": finite(step.get("p50")),
                     "p90": finite(step.get("p90")), "peak_memory_bytes": finite(r.get("peak_memory_bytes")),
                     "max_batch_size": r.get("max_batch_size"), "speedup": finite(r.get("speedup_vs_fp32")),
                     "speedup_ci": ci if ci and None not in ci else None, "repeats": r.get("repeats"),
                     "memory_saving": finite(r.get("memory_saving_vs_fp32")),
                     "skipped_steps": r.get("skipped_steps"), "final_loss": finite(r.get("final_loss")),
                     "warmup_skipped_steps": r.get("warmup_skipped_steps"),
                     "flags": [str(f) for f in r.get("flags") or [] if isinstance(f, str)],
                     "warning": r.get("warning") if isinstance(r.get("warning"), str) else None,
                     "tflops": finite(r.get("tflops")), "mfu": finite(r.get("mfu"))})
        row = rows[-1]
        row["speedup_verdict"] = _speedup_verdict(r.get("speedup_verdict"), row)
        row["memory_words"] = "baseline" if row["mode"] == "fp32" else memory_words(row["memory_saving"])
        row["status_words"] = (row["status"] + ", " + ", ".join(FLAG_WORDS.get(f, f) for f in row["flags"])
                               if row["status"] == "ok" and row["flags"] else row["status"])
    return BenchView(doc, rows, str(d["workload"]), str(d["device"]),
                     has_ci=any(r["speedup_ci"] for r in rows),
                     has_max_batch=any(r["max_batch_size"] is not None for r in rows), note=d.get("note"))


#: bench flags in words (see ampkit.bench.judge)
FLAG_WORDS = {"diverged": "loss diverged", "all_timed_steps_skipped": "all timed steps skipped"}
#: the doctor's threshold: faster/slower only when the interval's end clears it (ampkit.bench.judge.THRESHOLD)
THRESHOLD = 1.10
SPEEDUP_VERDICTS = ("faster", "slower", "no measurable difference", "small difference", "baseline")


def memory_words(saving) -> str:
    """memory_saving_vs_fp32 (fp32 peak / mode peak) as "1.30× less" / "1.10× more"."""
    if saving is None or saving <= 0:
        return "—"
    if abs(saving - 1) < 0.005:
        return "same as fp32"
    return f"{saving:.2f}× less" if saving > 1 else f"{1 / saving:.2f}× more"


def _speedup_verdict(word, row: dict) -> str | None:
    """The row's own words when it has them (bench writes ``speedup_verdict``), else read from its
    interval by the doctor's rule; a speedup without an interval (an older one-run document) has no
    verdict: one run cannot tell a difference from noise."""
    if row["mode"] == "fp32":
        return "baseline"
    if isinstance(word, str) and word in SPEEDUP_VERDICTS:
        return word
    ci = row["speedup_ci"]
    if row["speedup"] is None or not ci:
        return None
    lo, hi = ci
    if lo >= THRESHOLD:
        return "faster"
    if hi <= 1 / THRESHOLD:
        return "slower"
    return "no measurable difference" if lo <= 1 <= hi else "small difference"


def _curve(runs: list, key: str) -> tuple[list[float], list[float]] | None:
    """Mean and std per epoch over seeds (runs of unequal length: the common prefix)."""
    series = [[finite(v) for v in run.get(key) or []] for run in runs if isinstance(run, dict)]
    series = [s for s in series if s and None not in s]
    if not series:
        return None
    n = min(len(s) for s in series)
    mean, std = [], []
    for i in range(n):
        vals = [s[i] for s in series]
        mu = sum(vals) / len(vals)
        mean.append(mu)
        std.append((sum((v - mu) ** 2 for v in vals) / (len(vals) - 1)) ** 0.5 if len(vals) > 1 else 0.0)
    return mean, std


def parity_view(doc: Document) -> ParityView:
    d = doc.data
    rows = []
    for r in d["results"]:
        runs = r.get("runs") if isinstance(r.get("runs"), list) else []
        rows.append({"mode": r["mode"], "seeds": r.get("seeds") or [], "metric_name": r["metric"].get("name", "metric"),
                     "metric_mean": finite(r["metric"].get("mean")), "metric_std": finite(r["metric"].get("std")),
                     "loss_mean": finite(r["final_loss"].get("mean")), "loss_std": finite(r["final_loss"].get("std")),
                     "delta": finite(r.get("delta_vs_fp32")), "p_value": finite(r.get("p_value")),
                     "verdict": r["verdict"], "reason": r.get("reason") or "", "skipped_steps": r.get("skipped_steps"),
                     "acc_curve": _curve(runs, "test_accuracy"), "loss_curve": _curve(runs, "train_loss")})
    return ParityView(doc, rows, str(d["dataset"]), str(d.get("device") or "—"), finite(d.get("tolerance")),
                      finite(d.get("alpha")), d.get("epochs"), any(r["acc_curve"] for r in rows))


def audit_view(doc: Document) -> AuditView:
    d = doc.data
    first = d["first_nonfinite"]
    kinds: dict[str, list[str]] = {}
    for f in d["findings"]:
        kinds.setdefault(f["layer"], []).append(f["kind"])
    layers = []
    for i, lay in enumerate(d["layers"]):
        layers.append({"index": i, "name": lay["name"] or "(model)", "raw_name": lay["name"], "type": lay["type"],
                       "fwd_amax": finite(lay.get("fwd_amax")), "fwd_headroom": finite(lay.get("fwd_headroom_log2")),
                       "fwd_underflow": finite(lay.get("fwd_underflow_frac")) or 0.0,
                       "fwd_nonfinite": lay.get("fwd_nonfinite") or 0, "grad_amax": finite(lay.get("grad_amax")),
                       "grad_headroom": finite(lay.get("grad_headroom_log2")),
                       "grad_underflow": finite(lay.get("grad_underflow_frac")) or 0.0,
                       "grad_nonfinite": lay.get("grad_nonfinite") or 0, "rel_error": finite(lay.get("rel_error")),
                       "first": bool(first and first["name"] == lay["name"]),
                       "kinds": list(dict.fromkeys(kinds.get(lay["name"], [])))})
    findings = [{"layer": f["layer"] or "(model)", "kind": f["kind"], "advice": f["advice"],
                 "severity": f.get("severity") if f.get("severity") in SEVERITIES else "finding",
                 "first": bool(first and first["name"] == f["layer"] and f["kind"] == "nonfinite")}
                for f in d["findings"]]
    return AuditView(doc, str(d.get("workload") or "model"), d["mode"], str(d.get("device") or "—"),
                     float(d["loss_scale"]), d.get("steps"), first, findings, layers,
                     finite(d.get("suggested_loss_scale")))


#: audit findings' severities, most severe first (ampkit.audit.core.Finding); "finding": a document without them
SEVERITIES = ("error", "warning", "note")


def findings_summary(findings: list[dict]) -> tuple[str, str]:
    """("29 findings: 3 errors, 20 warnings, 6 notes", tone) -- never "clean" when there is one.
    Tone: bad with an error, neutral with a warning (or findings of unknown severity), muted for notes only."""
    if not findings:
        return "clean", "good"
    counts = {}
    for f in findings:
        counts[f.get("severity") or "finding"] = counts.get(f.get("severity") or "finding", 0) + 1
    n = len(findings)
    parts = [f"{counts[s]} {s}{'s' * (counts[s] != 1)}" for s in (*SEVERITIES, "finding") if counts.get(s)]
    text = f"{n} finding{'s' * (n != 1)}" + (f": {', '.join(parts)}" if set(counts) != {"finding"} else "")
    tone = "bad" if counts.get("error") else "neutral" if counts.get("warning") or counts.get("finding") else "muted"
    return text, tone


# ---------------------------------------------------------------- environments and the whole report
@dataclass
class Environment:
    letter: str
    fields: dict[str, str]
    docs: list[Document] = field(default_factory=list)
    doctor: list[DoctorView] = field(default_factory=list)
    bench: list[BenchView] = field(default_factory=list)
    parity: list[ParityView] = field(default_factory=list)
    audit: list[AuditView] = field(default_factory=list)

    @property
    def title(self) -> str:
        f = self.fields
        hw = f["gpu"] if f["gpu"] != "—" else f"{f['cpu']} (CPU only)"
        return f"{f['framework']} · {hw}"

    @property
    def anchor(self) -> str:
        return f"env-{self.letter.lower()}"

    def verdicts(self) -> list[dict]:
        """The facts that answer "does it work and pay off here": one row per (command, subject)."""
        rows = []
        for v in self.doctor:
            rows.append({"key": "doctor: recommended", "text": v.recommended, "tone": "info"})
            for r in v.rows:
                if r["mode"] == "fp32":
                    continue
                text = r["verdict"]
                if r["speedup"] is not None:
                    text += f" ({r['speedup']:.2f}×)"
                rows.append({"key": f"doctor: {r['mode']}", "text": text, "tone": tone(r["verdict"])})
        for v in self.bench:
            for r in v.rows:
                if r["mode"] == "fp32" and r["status"] == "ok":
                    continue
                if r["status"] != "ok":
                    text, t = r["status"], tone(r["status"])
                elif r["flags"]:  # the bench withheld the speedup: say why, in red
                    text, t = f"{r['status_words']}: no speedup claimed", "bad"
                elif r["speedup"] is None:
                    text, t = "ok", "neutral"
                else:
                    text = f"{r['speedup']:.2f}× fp32"
                    if r["speedup_ci"]:
                        text += f" [{r['speedup_ci'][0]:.2f}, {r['speedup_ci'][1]:.2f}]"
                    verdict = r["speedup_verdict"]
                    if verdict in ("no measurable difference", "small difference"):
                        text += f": {verdict}"
                    elif verdict is None:
                        text += ": one run, no interval"
                    # green or red only when the interval clears the threshold; otherwise neither
                    t = "good" if verdict == "faster" else "bad" if verdict == "slower" else "neutral"
                rows.append({"key": f"bench {v.workload}: {r['mode']}", "text": text, "tone": t})
        for v in self.parity:
            for r in v.rows:
                if r["verdict"] == "baseline":
                    continue
                text = r["verdict"] + (f" (p={r['p_value']:.3g})" if r["p_value"] is not None else "")
                rows.append({"key": f"parity {v.dataset}: {r['mode']}", "text": text, "tone": tone(r["verdict"])})
        for v in self.audit:
            text, t = findings_summary(v.findings)
            if v.first:
                first = f"inf/NaN first in {v.first['name'] or '(model)'} ({v.first['phase']})"
                text, t = (f"{first}; {text}" if v.findings else first), "bad"
            rows.append({"key": f"audit {v.workload}: {v.mode}", "text": text, "tone": t})
        return rows


def tone(word: str) -> str:
    return "good" if word in GOOD else "bad" if word in BAD else "muted" if word in MUTED else "neutral"


@dataclass
class Report:
    environments: list[Environment]
    documents: list[Document]
    generated: str
    version: str = __version__

    @property
    def counts(self) -> str:
        """ "5 documents from 2 environments" """
        nd, ne = len(self.documents), len(self.environments)
        return f"{nd} document{'s' * (nd != 1)} from {ne} environment{'s' * (ne != 1)}"

    @property
    def interrupted(self) -> list[Document]:
        return [d for d in self.documents if d.interrupted]

    def env_of(self, doc: Document) -> Environment:
        return next(e for e in self.environments if doc in e.docs)

    def env_rows(self) -> list[dict]:
        """The environment table: one row per field, one column per environment, differing rows flagged."""
        rows = []
        for key, label, _get in ENV_FIELDS:
            values = [e.fields[key] for e in self.environments]
            rows.append({"label": label, "values": values, "differs": len(set(values)) > 1})
        return rows

    def verdict_rows(self) -> list[dict]:
        """The verdicts side by side: a row per subject seen in any environment; flagged when they differ."""
        keys: list[str] = []
        cells: list[dict[str, list[dict]]] = []
        for env in self.environments:
            by_key: dict[str, list[dict]] = {}
            for row in env.verdicts():
                if row["key"] not in keys:
                    keys.append(row["key"])
                by_key.setdefault(row["key"], []).append(row)
            cells.append(by_key)
        rows = []
        for key in keys:
            values, present = [], set()
            for by_key in cells:
                found = by_key.get(key, [])
                values.append({"text": " / ".join(r["text"] for r in found) if found else "—",
                               "tone": found[-1]["tone"] if found else "none"})
                if found:  # what this environment says, however many documents say it
                    present.add(frozenset(r["text"] for r in found))
            rows.append({"label": key, "values": values, "differs": len(present) > 1})
        return rows


def build(docs: list[Document], now: _dt.datetime | None = None) -> Report:
    envs: list[Environment] = []
    index: dict[tuple, Environment] = {}
    for doc in docs:
        fields = environment_fields(doc)
        key = tuple(fields.values())
        env = index.get(key)
        if env is None:
            env = index[key] = Environment(_letter(len(envs)), fields)
            envs.append(env)
        env.docs.append(doc)
        view = {"doctor": doctor_view, "bench": bench_view, "parity": parity_view, "audit": audit_view}[doc.command](doc)
        getattr(env, doc.command).append(view)
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return Report(envs, docs, now.strftime("%Y-%m-%d %H:%M UTC"))


def _letter(i: int) -> str:
    return chr(ord("A") + i) if i < 26 else f"E{i + 1}"


def short_path(path: str) -> str:
    return os.path.basename(path)
