"""The parity document: per (mode, seed) runs, per-mode results and verdicts, the report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

ALPHA = 0.05


@dataclass
class RunRecord:
    """One (mode, seed) training run."""

    mode: str
    seed: int
    train_loss: list[float]       # per epoch, mean over its batches
    test_accuracy: list[float]    # per epoch
    test_loss: list[float]        # per epoch
    skipped_steps: int
    seconds: float


@dataclass
class ParityResult:
    mode: str
    seeds: list[int]
    final_loss: dict
    metric: dict
    delta_vs_fp32: float | None
    p_value: float | None
    verdict: str                  # baseline | pass | fail
    reason: str = ""
    skipped_steps: int = 0
    runs: list[RunRecord] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ParityResult:
        runs = [RunRecord(**r) for r in d.get("runs", [])]
        return cls(**{**{k: d[k] for k in cls.__dataclass_fields__ if k in d and k != "runs"}, "runs": runs})


@dataclass
class ParityReport:
    dataset: str
    device: str
    results: list[ParityResult]
    environment: dict
    tolerance: float
    epochs: int
    alpha: float = ALPHA
    elapsed_s: float | None = None
    interrupted: bool = False
    note: str | None = None        # what "auto" in the modes resolved to

    @property
    def failed(self) -> bool:
        return any(r.verdict == "fail" for r in self.results)

    @property
    def framework(self) -> str | None:
        """Which framework ran: read from the environment section, the one place a backend sets it."""
        return self.environment.get("framework")

    def to_dict(self) -> dict:
        from .._version import __version__

        return {"ampkit_version": __version__, "command": "parity", "environment": self.environment,
                "framework": self.framework, "dataset": self.dataset, "device": self.device,
                "tolerance": self.tolerance, "alpha": self.alpha, "epochs": self.epochs,
                "results": [r.to_dict() for r in self.results], "elapsed_s": self.elapsed_s,
                "interrupted": self.interrupted, "note": self.note}

    @classmethod
    def from_dict(cls, d: dict) -> ParityReport:
        return cls(dataset=d["dataset"], device=d["device"], results=[ParityResult.from_dict(r) for r in d["results"]],
                   environment=d.get("environment", {}), tolerance=d["tolerance"], epochs=d["epochs"],
                   alpha=d.get("alpha", ALPHA), elapsed_s=d.get("elapsed_s"), interrupted=d.get("interrupted", False),
                   note=d.get("note"))
