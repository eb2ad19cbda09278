"""Doctor results: dataclasses that serialise to the contract's JSON and back."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..display import ResultDisplay
from ..envelope import OPT_BOOL, OPT_NUM, DocumentError, check, envelope, known, where_in

VERDICTS = ("recommended", "usable", "slower", "unsupported", "broken")
SELFTESTS = ("pass", "fail", "skip")
#: the contract's keys (and types) of a doctor document and of each of its modes; the rest is optional
SCHEMA = {"framework": str, "device": str, "modes": dict, "recommended": (str, type(None)), "reason": str}
MODE_SCHEMA = {"supported": bool, "accelerated": OPT_BOOL, "speedup": OPT_NUM, "selftest": str, "verdict": str}
MODE_CHOICES = {"verdict": VERDICTS, "selftest": SELFTESTS}


@dataclass
class ModeReport:
    """One precision mode on one device. Contract keys first; details after."""

    supported: bool
    accelerated: bool | None = None
    speedup: float | None = None
    speedup_ci: list[float] | None = None  # 95% interval of speedup over the paired rounds
    rounds: int | None = None              # interleaved rounds measured
    #: why its rounds ended (ampkit.rounds_sequential): "decided: slower" | "decided: accelerated" | "decided:
    #: no measurable difference" | "cap" | "cap: time budget"; fp32: "baseline"; None: not measured
    stopped: str | None = None
    selftest: str = "skip"  # pass | fail | skip
    verdict: str = "unsupported"
    reason: str = ""
    support_reason: str = ""
    selftest_detail: str = ""
    training_speedup: float | None = None  # a short training step through the engine vs fp32
    training_speedup_ci: list[float] | None = None
    benchmark: dict = field(default_factory=dict)  # per-op timings behind `speedup`
    emulated: bool = False  # unsupported by the hardware, self-tested in the engine's emulation (fp8, torchao)
    speedup_by_size: dict | None = None     # {"256": x, ...}: the matmul vs fp32 at each size (doctor.sizes)
    speedup_by_size_ci: dict | None = None  # {"256": [low, high], ...}: the 95% interval of each
    speedup_by_size_detail: dict | None = None  # every size, with rounds or why it was not measured

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict, where: str = "") -> ModeReport:
        return cls(**known(cls, check(d, MODE_SCHEMA, where, MODE_CHOICES)))


@dataclass
class DoctorReport(ResultDisplay, command="doctor"):
    framework: str
    device: str
    modes: dict[str, ModeReport]
    recommended: str | None  # None: a --quick doctor with no measured verdict cached (the reason says "not measured")
    reason: str
    environment: dict
    quick: bool = False
    elapsed_s: float | None = None
    # other builds of the framework self-tested as well, e.g. {"tf_keras": {"label": "tf_keras 2.21.0",
    # "modes": {"fp16": {"selftest": "pass", "detail": "..."}}}} (TensorFlow's Keras 2 next to Keras 3)
    variants: dict = field(default_factory=dict)
    #: where this measured verdict was cached for ``auto`` (:mod:`ampkit.auto_cache`), None when not
    auto_cache: str | None = None

    @property
    def failed(self) -> bool:
        """A self-test failed for a mode reported as supported, here or in a variant (exit code 1)."""
        return (any((m.supported or m.emulated) and m.selftest == "fail" for m in self.modes.values())
                or any(v.get("selftest") == "fail" for var in self.variants.values() for v in var.get("modes", {}).values()))

    def to_dict(self) -> dict:
        return envelope("doctor", self.environment, framework=self.framework, device=self.device,
                        modes={k: v.to_dict() for k, v in self.modes.items()}, recommended=self.recommended,
                        reason=self.reason, quick=self.quick, elapsed_s=self.elapsed_s, variants=self.variants,
                        auto_cache=self.auto_cache)

    @classmethod
    def from_dict(cls, d: dict, where: str = "") -> DoctorReport:
        """The report of a document (``where``: its place inside a ``--framework all`` document).
        Raises :class:`~ampkit.envelope.DocumentError` for a malformed one."""
        check(d, SCHEMA, where)
        modes = {k: ModeReport.from_dict(m, where_in(where, f"modes.{k}")) for k, m in d["modes"].items()}
        env, variants = d.get("environment"), d.get("variants")
        return cls(framework=d["framework"], device=d["device"], modes=modes, recommended=d["recommended"],
                   reason=d["reason"], environment=env if isinstance(env, dict) else {},
                   quick=bool(d.get("quick", False)), elapsed_s=d.get("elapsed_s"),
                   variants=variants if isinstance(variants, dict) else {}, auto_cache=d.get("auto_cache"))


@dataclass
class DoctorSet(ResultDisplay, command="doctor"):
    """One document for several frameworks: ``doctor --framework all``, and an interrupted doctor
    (the frameworks that finished). ``environment``: the first framework's."""

    reports: dict[str, DoctorReport]
    environment: dict
    interrupted: bool = False

    @property
    def failed(self) -> bool:
        return any(r.failed for r in self.reports.values())

    def to_dict(self) -> dict:
        doc = envelope("doctor", self.environment, frameworks={k: r.to_dict() for k, r in self.reports.items()})
        if self.interrupted:
            doc["interrupted"] = True
        return doc

    @classmethod
    def from_dict(cls, d: dict) -> DoctorSet:
        """A part without an environment of its own takes the document's."""
        parts = d.get("frameworks")
        if not isinstance(parts, dict) or not parts:
            raise DocumentError("'frameworks' should be an object of framework -> doctor document")
        env = d.get("environment") if isinstance(d.get("environment"), dict) else {}
        reports = {}
        for name, part in parts.items():
            reports[name] = report = DoctorReport.from_dict(part, f"frameworks.{name}")
            if not isinstance(part.get("environment"), dict):
                report.environment = env
        return cls(reports, env, bool(d.get("interrupted", False)))


def from_document(d: dict) -> DoctorReport | DoctorSet:
    """A doctor document: one framework's report, or a ``--framework all`` set of them."""
    return DoctorSet.from_dict(d) if "frameworks" in d else DoctorReport.from_dict(d)
