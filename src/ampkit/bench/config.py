"""What a bench run is asked to do: a frozen config, checked once when it is made.

Every range check lives here, so the command line and ``ampkit.bench(...)`` refuse the same values
with the same sentence, naming the CLI flag ("--steps must be >= 1 and at most 1,000,000; received 0").
What a run decides -- the default workload, what ``auto`` resolved to, where ``--batch-size auto``
started -- is part of its report (:mod:`ampkit.bench.driver`), never written back here.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

from ..checks import (
    MAX_BATCH,
    MAX_CLASSES,
    MAX_MEMORY_BYTES,
    MAX_SAMPLE_ELEMENTS,
    MAX_STEPS,
    MAX_TIMEOUT_S,
    float_in,
    int_in,
)
from ..errors import UsageError

_UNITS = {"": 1, "b": 1, "k": 2**10, "kib": 2**10, "kb": 10**3, "m": 2**20, "mib": 2**20, "mb": 10**6,
          "g": 2**30, "gib": 2**30, "gb": 10**9, "t": 2**40, "tib": 2**40, "tb": 10**12}

AUTO_BATCH = "auto"


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


@dataclass(frozen=True)
class BenchConfig:
    """One bench run's request. Normalised at construction: ``modes`` may be a comma string or a list
    (aliases and ``auto`` accepted), ``memory_budget`` a size string ("2GiB"), and a memory budget
    implies ``batch_size="auto"``."""

    workload: str | None = None          # built-in name; None -> the device's default
    model: str | None = None             # MODULE:FACTORY
    input_shape: tuple[int, ...] | None = None
    num_classes: int | None = None       # None: what the model declares (Keras), else 10
    modes: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16")
    batch_size: int | str | None = None  # int, "auto", or None (the workload's default)
    memory_budget: int | None = None     # bytes
    steps: int = 20
    warmup: int = 5
    device: str = "auto"
    seed: int = 0
    search_cap: int = 1 << 16            # the largest batch size --batch-size auto tries (--max-batch-size)
    timeout: float | None = 1800.0       # seconds per mode's child (and the model probe); None: no limit
    repeats: int = 1                     # the mode sequence this many times, interleaved
    seq_len: int | None = None           # --seq-len for a built-in sequence workload (bert-base, gpt2)
    image_size: int | None = None        # --image-size for a built-in image workload (cnn, resnet50, vit_b_16)
    explain: bool = False                # --explain: profile a few more steps per mode, a breakdown and why
    strategy: str | None = None          # --strategy mirrored: Keras under tf.distribute.MirroredStrategy
    replicas: int | None = None          # --replicas N: N logical CPU devices (testing a strategy on a CPU)
    compile: str = "off"                 # --compile off|on|both: torch.compile / Keras jit_compile (bench/compiled.py)
    plan: dict | None = None             # --plan PATH: a precision plan, run as one more mode "plan:<default>"
    threads: int | None = None           # --threads N: CPU threads each mode's child times with (ampkit.threads);
    #                                      None: the policy's default (1 on a CPU), filled in by the driver
    data: str | None = None              # --data MODULE:FACTORY: time a real batch of the user's data (PyTorch)

    def __post_init__(self) -> None:
        for flag, value in (("--workload", self.workload), ("--model", self.model)):
            if value is not None and not isinstance(value, str):
                raise UsageError(f"{flag} must be a name (a string); received {value!r}")
        if self.workload and self.model:
            raise UsageError("give either --workload or --model, not both")
        from ..factory import split_spec

        for flag, spec in (("--model", self.model), ("--data", self.data)):
            if spec is not None:
                split_spec(spec, flag)
        if self.data and not self.model:
            raise UsageError("--data goes with --model (your model fed your data); a built-in workload makes its own batches")
        int_in(self.steps, "--steps", 1, MAX_STEPS)
        int_in(self.warmup, "--warmup", 0, MAX_STEPS)
        int_in(self.repeats, "--repeats", 1, MAX_STEPS)
        int_in(self.num_classes, "--num-classes", 1, MAX_CLASSES)
        int_in(self.search_cap, "--max-batch-size", 1, MAX_BATCH)
        float_in(self.timeout, "--timeout", 0, MAX_TIMEOUT_S, lo_open=True)
        from ..threads import check as check_threads

        self._set("threads", check_threads(self.threads))
        if not isinstance(self.explain, bool):
            raise UsageError(f"explain must be True or False; received {self.explain!r}")
        _strategy(self)
        from .compiled import check_compile

        self._set("compile", check_compile(self.compile))
        self._set("modes", _modes(self.modes))
        if self.plan is not None:  # --plan: one more mode, next to the others (ampkit.plan)
            from ..plan_format import load_plan

            plan = load_plan(self.plan)
            self._set("plan", plan.to_dict())
            self._set("modes", tuple(m for m in self.modes if m != plan.label) + (plan.label,))
        self._set("input_shape", _input_shape(self.input_shape))
        self._set("batch_size", _batch_size(self.batch_size))
        _replica_limits(self)
        if self.memory_budget is not None:
            if self.batch_size not in (None, AUTO_BATCH):
                raise UsageError("--memory-budget sets the limit for --batch-size auto; drop the explicit --batch-size")
            self._set("memory_budget", _memory_budget(self.memory_budget))
            self._set("batch_size", AUTO_BATCH)
        from ..workload_sizes import check_flag_values, size_kwargs

        check_flag_values(self.seq_len, self.image_size)
        if self.model:
            size_kwargs("", None, self.model, self.seq_len, self.image_size)  # sizes are for built-ins only

    def _set(self, name: str, value) -> None:
        object.__setattr__(self, name, value)  # a normalisation at construction, before anyone reads it

    def to_dict(self) -> dict:
        d = asdict(self)
        d["input_shape"] = list(self.input_shape) if self.input_shape else None
        d["modes"] = list(self.modes)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> BenchConfig:
        """From :meth:`to_dict`'s keys (others, such as a document's ``auto_mode``, are ignored)."""
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


STRATEGIES = ("mirrored",)
MAX_REPLICAS = 64


def _strategy(cfg: BenchConfig) -> None:
    """--strategy (None or mirrored) and --replicas (1..64, only with a strategy; not with --batch-size auto)."""
    if cfg.strategy is not None and cfg.strategy not in STRATEGIES:
        raise UsageError(f"--strategy must be one of {', '.join(STRATEGIES)}; received {cfg.strategy!r}")
    int_in(cfg.replicas, "--replicas", 1, MAX_REPLICAS)
    if cfg.replicas is not None and cfg.strategy is None:
        raise UsageError("--replicas N sets the devices of --strategy mirrored; add --strategy mirrored")
    if cfg.strategy is not None and isinstance(cfg.batch_size, str):
        raise UsageError("--strategy mirrored runs a fixed global batch; give --batch-size N (or none), not auto")


def _replica_limits(cfg: BenchConfig) -> None:
    """--replicas N (logical CPU devices): no XLA compile there, and a global batch of at least N."""
    if cfg.replicas is None:
        return
    if cfg.compile != "off":
        raise UsageError("--compile on|both cannot run with --replicas (XLA cannot place a mirrored variable "
                         "on logical CPU devices); drop --compile or --replicas")
    if isinstance(cfg.batch_size, int) and cfg.batch_size < cfg.replicas:
        raise UsageError(f"--batch-size {cfg.batch_size} is smaller than --replicas {cfg.replicas}: a replica "
                         "would get an empty batch; give a global batch of at least the replica count")


def _modes(modes) -> tuple[str, ...]:
    from ..precision import parse_mode_list

    if not isinstance(modes, str) and not (isinstance(modes, (list, tuple)) and all(isinstance(m, str) for m in modes)):
        raise UsageError(f"--modes must be a comma-separated string or a list of modes; received {modes!r}")
    parts = modes.split(",") if isinstance(modes, str) else list(modes)
    # a plan's own row ("plan:<default>", added beside the modes once the plan is read) stays as it is when a
    # config is rebuilt (dataclasses.replace runs this check again)
    plans = {i: m.strip() for i, m in enumerate(parts) if m.strip().startswith("plan:")}
    text = ",".join(m for i, m in enumerate(parts) if i not in plans)
    parsed = list(parse_mode_list(text, allow_auto=True)) if text.strip() else []
    for i in sorted(plans):
        parsed.insert(min(i, len(parsed)), plans[i])
    return tuple(parsed)


def _input_shape(shape) -> tuple[int, ...] | None:
    if shape is None:
        return None
    dims = tuple(shape)
    if not dims or any(not isinstance(d, int) or isinstance(d, bool) or d <= 0 for d in dims):
        raise UsageError(f"--input-shape must be comma-separated positive integers like 3,32,32; received {shape!r}")
    if math.prod(dims) > MAX_SAMPLE_ELEMENTS:
        raise UsageError(f"--input-shape {','.join(map(str, dims))} is {math.prod(dims):,} values per sample; "
                         f"at most {MAX_SAMPLE_ELEMENTS:,} are accepted")
    return dims


def _batch_size(value) -> int | str | None:
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() == AUTO_BATCH:
        return AUTO_BATCH
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= MAX_BATCH:
        raise UsageError(f"--batch-size must be a positive integer (at most {MAX_BATCH:,}) or 'auto'; "
                         f"received {value!r}")
    return value


def _memory_budget(value) -> int:
    nbytes = parse_size(value) if isinstance(value, str) else value
    if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes <= 0:
        raise UsageError(f"--memory-budget must be a positive number of bytes or a size such as 2GiB; "
                         f"received {value!r}")
    if nbytes > MAX_MEMORY_BYTES:
        raise UsageError(f"--memory-budget must be at most 2**60 bytes (1 EiB); received {nbytes:.3g} bytes")
    return nbytes
