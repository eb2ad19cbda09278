"""Bench results: dataclasses that serialise to the contract's JSON (and CSV) and back."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

STATUSES = ("ok", "unsupported", "oom", "error")
CSV_COLUMNS = ["mode", "status", "error", "batch_size", "samples_per_s", "step_ms_p50", "step_ms_p90",
               "peak_memory_bytes", "max_batch_size", "speedup_vs_fp32", "memory_saving_vs_fp32",
               "skipped_steps", "final_loss", "tflops", "mfu", "repeats", "speedup_ci_low", "speedup_ci_high",
               "resolved_from"]


@dataclass
class BenchRow:
    mode: str
    status: str = "ok"
    error: str | None = None
    batch_size: int | None = None
    samples_per_s: float | None = None
    step_ms: dict = field(default_factory=lambda: {"p50": None, "p90": None})
    peak_memory_bytes: int | None = None
    max_batch_size: int | None = None
    speedup_vs_fp32: float | None = None
    memory_saving_vs_fp32: float | None = None  # fp32 peak / this mode's peak (>1: uses less)
    skipped_steps: int = 0
    final_loss: float | None = None
    tflops: float | None = None
    mfu: float | None = None
    steps: int | None = None
    memory_source: str | None = None  # how peak memory was measured
    device_name: str | None = None
    search: list = field(default_factory=list)  # (batch size, fits, peak bytes) tried by --batch-size auto
    repeats: int = 1                    # runs of this mode (--repeats), folded into this row
    speedup_ci: list | None = None      # interval of speedup_vs_fp32 over the paired repeats; None for 1
    runs: list = field(default_factory=list)  # samples/s of each repeat
    resolved_from: str | None = None    # "auto" when auto chose this mode
    resolved_reason: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> BenchRow:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    def csv_row(self) -> dict:
        d = self.to_dict()
        d["step_ms_p50"] = self.step_ms.get("p50")
        d["step_ms_p90"] = self.step_ms.get("p90")
        d["speedup_ci_low"], d["speedup_ci_high"] = self.speedup_ci or (None, None)
        return d


@dataclass
class BenchReport:
    workload: str
    device: str
    results: list[BenchRow]
    environment: dict
    world_size: int = 1
    flops_per_sample: float | None = None
    config: dict = field(default_factory=dict)
    note: str | None = None
    interrupted: bool = False

    @property
    def framework(self) -> str | None:
        """Which framework ran: read from the environment section, the one place a backend sets it."""
        return self.environment.get("framework")

    def to_dict(self) -> dict:
        from .._version import __version__

        return {
            "ampkit_version": __version__,
            "command": "bench",
            "environment": self.environment,
            "workload": self.workload,
            "framework": self.framework,
            "device": self.device,
            "world_size": self.world_size,
            "results": [r.to_dict() for r in self.results],
            "flops_per_sample": self.flops_per_sample,
            "config": self.config,
            "note": self.note,
            "interrupted": self.interrupted,
        }

    @classmethod
    def from_dict(cls, d: dict) -> BenchReport:
        return cls(workload=d["workload"], device=d["device"], results=[BenchRow.from_dict(r) for r in d["results"]],
                   environment=d.get("environment", {}),
                   world_size=d.get("world_size", 1), flops_per_sample=d.get("flops_per_sample"),
                   config=d.get("config", {}), note=d.get("note"), interrupted=d.get("interrupted", False))


def derive_relative(rows: list[BenchRow]) -> None:
    """speedup_vs_fp32 = samples/s ratio; memory_saving_vs_fp32 = fp32 peak / mode peak."""
    base = next((r for r in rows if r.mode == "fp32" and r.status == "ok"), None)
    for r in rows:
        if base is None or r.status != "ok":
            r.speedup_vs_fp32 = r.memory_saving_vs_fp32 = None
            continue
        if r.samples_per_s and base.samples_per_s:
            r.speedup_vs_fp32 = r.samples_per_s / base.samples_per_s
        if r.peak_memory_bytes and base.peak_memory_bytes:
            r.memory_saving_vs_fp32 = base.peak_memory_bytes / r.peak_memory_bytes
