"""Doctor results: dataclasses that serialise to the contract's JSON and back."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

VERDICTS = ("recommended", "usable", "slower", "unsupported", "broken")


@dataclass
class ModeReport:
    """One precision mode on one device. Contract keys first; details after."""

    supported: bool
    accelerated: bool | None = None
    speedup: float | None = None
    speedup_ci: list[float] | None = None  # 95% interval of speedup over the paired rounds
    rounds: int | None = None              # interleaved rounds measured
    selftest: str = "skip"  # pass | fail | skip
    verdict: str = "unsupported"
    reason: str = ""
    support_reason: str = ""
    selftest_detail: str = ""
    training_speedup: float | None = None  # a short training step through the engine vs fp32
    training_speedup_ci: list[float] | None = None
    benchmark: dict = field(default_factory=dict)  # per-op timings behind `speedup`

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ModeReport:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass
class DoctorReport:
    framework: str
    device: str
    modes: dict[str, ModeReport]
    recommended: str
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
        return (any(m.supported and m.selftest == "fail" for m in self.modes.values())
                or any(v.get("selftest") == "fail" for var in self.variants.values() for v in var.get("modes", {}).values()))

    def to_dict(self) -> dict:
        from .._version import __version__

        return {
            "ampkit_version": __version__,
            "command": "doctor",
            "environment": self.environment,
            "framework": self.framework,
            "device": self.device,
            "modes": {k: v.to_dict() for k, v in self.modes.items()},
            "recommended": self.recommended,
            "reason": self.reason,
            "quick": self.quick,
            "elapsed_s": self.elapsed_s,
            "variants": self.variants,
            "auto_cache": self.auto_cache,
        }

    @classmethod
    def from_dict(cls, d: dict) -> DoctorReport:
        return cls(
            framework=d["framework"],
            device=d["device"],
            modes={k: ModeReport.from_dict(v) for k, v in d["modes"].items()},
            recommended=d["recommended"],
            reason=d["reason"],
            environment=d.get("environment", {}),
            quick=d.get("quick", False),
            elapsed_s=d.get("elapsed_s"),
            variants=d.get("variants", {}),
            auto_cache=d.get("auto_cache"),
        )
