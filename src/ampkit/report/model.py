"""From loaded documents to what the page shows: environments, their differences, per-command views."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field

from .._version import __version__
from ..envelope import COMMANDS
from ..render import PRESENTERS
from ..render.audit import AuditView
from ..render.bench import BenchView
from ..render.doctor import DoctorView
from ..render.parity import ParityView
from .load import Document

#: the CPU features that decide whether bf16/fp16 run natively on a CPU
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_fp16")


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
        out["ampkit"] = doc.version or "—"
    return out


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
    plan: list = field(default_factory=list)   # ampkit plan (render.plan.PlanView)

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
        from .reconcile import disagreements

        return [row for command in COMMANDS for view in getattr(self, command)
                for row in PRESENTERS[command].verdicts(view)] + disagreements(self)


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
        getattr(env, doc.command).append(PRESENTERS[doc.command].page_view(doc.report, doc))
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return Report(envs, docs, now.strftime("%Y-%m-%d %H:%M UTC"))


def _letter(i: int) -> str:
    return chr(ord("A") + i) if i < 26 else f"E{i + 1}"
