"""What a bench run is asked to do, validated before anything heavy runs."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from ..errors import UsageError

_UNITS = {"": 1, "b": 1, "k": 2**10, "kib": 2**10, "kb": 10**3, "m": 2**20, "mib": 2**20, "mb": 10**6,
          "g": 2**30, "gib": 2**30, "gb": 10**9, "t": 2**40, "tib": 2**40, "tb": 10**12}


def parse_size(text: str) -> int:
    """'8GiB', '512MiB', '1.5GB', '1000000' -> bytes (KiB/MiB/GiB binary, KB/MB/GB decimal)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in _UNITS:
        raise UsageError(f"cannot read memory size {text!r}; use bytes with an optional unit, e.g. 8GiB, 512MiB, 2GB")
    value = float(m.group(1)) * _UNITS[unit]
    if not value < 2**60:
        raise UsageError(f"memory size {text!r} is too large; at most 2**60 bytes (1 EiB) is accepted")
    value = int(value)
    if value <= 0:
        raise UsageError(f"memory size must be positive; received {text!r}")
    return value


@dataclass
class BenchConfig:
    workload: str | None = None          # built-in name; None -> the device's default
    model: str | None = None             # MODULE:FACTORY
    input_shape: tuple[int, ...] | None = None
    num_classes: int | None = None   # None: what the model declares (Keras), else 10
    modes: list[str] = field(default_factory=lambda: ["fp32", "tf32", "fp16", "bf16"])
    batch_size: int | str | None = None  # int, "auto", or None (the workload's default)
    memory_budget: int | None = None     # bytes
    steps: int = 20
    warmup: int = 5
    device: str = "auto"
    seed: int = 0
    search_cap: int = 1 << 16            # the largest batch size --batch-size auto tries
    batch_size_hint: int | None = None   # where --batch-size auto starts (default: the workload's)
    timeout: float | None = 1800.0       # seconds per mode's child (and the model probe); None: no limit
    repeats: int = 1                     # the mode sequence this many times, interleaved
    seq_len: int | None = None           # --seq-len for a built-in sequence workload (bert-base, gpt2)
    image_size: int | None = None        # --image-size for a built-in image workload (cnn, resnet50, vit_b_16)
    auto_mode: str | None = None         # what "auto" in modes resolved to (set by the backend)
    auto_reason: str | None = None

    def validate(self) -> BenchConfig:
        if self.workload and self.model:
            raise UsageError("give either --workload or --model, not both")
        if isinstance(self.batch_size, int) and self.batch_size <= 0:
            raise UsageError(f"--batch-size must be a positive integer or 'auto'; received {self.batch_size}")
        if self.memory_budget is not None and self.batch_size not in (None, "auto"):
            raise UsageError("--memory-budget sets the limit for --batch-size auto; drop the explicit --batch-size")
        if self.memory_budget is not None:
            self.batch_size = "auto"
        if self.steps < 1:
            raise UsageError(f"--steps must be >= 1; received {self.steps}")
        if self.warmup < 0:
            raise UsageError(f"--warmup must be >= 0; received {self.warmup}")
        if self.search_cap < 1:
            raise UsageError(f"--max-batch-size must be >= 1; received {self.search_cap}")
        if self.repeats < 1:
            raise UsageError(f"--repeats must be >= 1; received {self.repeats}")
        if self.num_classes is not None and self.num_classes < 1:
            raise UsageError(f"--num-classes must be >= 1; received {self.num_classes}")
        from .sizes import check_flag_values, size_kwargs

        check_flag_values(self.seq_len, self.image_size)
        if self.model:
            size_kwargs("", None, self.model, self.seq_len, self.image_size)  # sizes are for built-ins only
        return self

    def to_dict(self) -> dict:
        d = asdict(self)
        d["input_shape"] = list(self.input_shape) if self.input_shape else None
        return d

    @classmethod
    def from_dict(cls, d: dict) -> BenchConfig:
        d = dict(d)
        if d.get("input_shape") is not None:
            d["input_shape"] = tuple(d["input_shape"])
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})
