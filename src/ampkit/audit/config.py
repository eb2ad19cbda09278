"""What an audit run is asked to do: frozen, and checked once, here, for the CLI and the library alike.

Every message names the CLI flag (``--steps must be >= 1 and at most 10,000; received 0``), so a
library caller reads the sentence a CLI user does. What a run decides -- the mode ``auto`` chose,
the workload that ran, the batch it audited at -- is in the :class:`~ampkit.audit.report.AuditReport`,
never written back here (the driver derives a new config with :func:`dataclasses.replace`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..checks import MAX_BATCH, MAX_CLASSES, MAX_LOSS_SCALE, MAX_SAMPLE_ELEMENTS, MAX_TIMEOUT_S, float_in, int_in
from ..errors import UsageError
from ..isolation import DEFAULT_TIMEOUT_S
from ..precision import parse_mode

#: the modes an audit compares against float32 (``auto`` resolves to one of them)
AUDIT_MODES = ("fp16", "bf16", "fp8")
MAX_AUDIT_STEPS = 10_000
#: the formats ``--what-if`` predicts (``--formats``, default all three)
WHAT_IF_FORMATS = ("fp16", "bf16", "fp8")
_FORMAT_ALIASES = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16", "float8": "fp8"}


def parse_formats(value) -> tuple[str, ...]:
    """``"fp16,bf16"`` or a sequence of names -> canonical names in the given order, each once."""
    items = value.split(",") if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else None
    if items is None:
        raise UsageError(f"--formats must be a comma-separated list of fp16, bf16, fp8; received {value!r}")
    out = []
    for item in items:
        name = _FORMAT_ALIASES.get(str(item).strip().lower(), str(item).strip().lower())
        if name not in WHAT_IF_FORMATS:
            raise UsageError(f"--formats takes fp16, bf16 and fp8; received {item!r}")
        if name not in out:
            out.append(name)
    if not out:
        raise UsageError("--formats needs at least one of fp16, bf16, fp8")
    return tuple(out)


@dataclass(frozen=True)
class AuditConfig:
    workload: str | None = None      # built-in name; None: the device's default (or --model)
    model: str | None = None         # MODULE:FACTORY
    input_shape: tuple[int, ...] | None = None
    num_classes: int | None = None   # None: what the model declares (Keras), else 10
    mode: str = "fp16"               # fp16, bf16, fp8 or auto (aliases accepted; kept canonical)
    steps: int = 1
    loss_scale: float | None = None  # None: the framework scaler's initial scale (fp16), 1 (bf16)
    batch_size: int | None = None    # None: the workload's (capped for the zoo on a CPU, and said so)
    device: str = "auto"
    seed: int = 0
    seq_len: int | None = None       # --seq-len of a built-in sequence workload
    image_size: int | None = None    # --image-size of a built-in image workload
    timeout: float | None = DEFAULT_TIMEOUT_S  # seconds the isolated audit may take (None: no limit)
    what_if: bool = False            # --what-if: float32 steps only, predictions for ``formats``
    formats: tuple[str, ...] = WHAT_IF_FORMATS  # --formats of a what-if run (canonical names, each once)
    compile: bool = False            # --compile: also compare torch.compile's forward with eager, per module
    data: str | None = None          # --data MODULE:FACTORY: audit on the first batch of the user's own data
    plan: dict | None = None         # a precision plan the audited mode runs under (its default is the mode)

    def __post_init__(self) -> None:
        mode = parse_mode(self.mode)
        if mode not in (*AUDIT_MODES, "auto"):
            raise UsageError(f"--mode must be fp16, bf16, fp8 or auto for an audit; received {self.mode!r}")
        object.__setattr__(self, "mode", mode)  # the canonical name, once: nobody re-parses it
        object.__setattr__(self, "formats", parse_formats(self.formats))
        if not isinstance(self.what_if, bool):
            raise UsageError(f"what_if must be True or False; received {self.what_if!r}")
        if self.what_if and mode != "fp16":  # the CLI refuses --what-if with --mode; the library the same
            raise UsageError(f"what_if runs float32 only and predicts every format; mode={self.mode!r} does not apply "
                             "(use formats=...)")
        if not isinstance(self.compile, bool):
            raise UsageError(f"compile must be True or False; received {self.compile!r}")
        if self.compile and self.what_if:
            raise UsageError("--compile audits a mode's compiled forward; it does not combine with --what-if")
        if self.compile and mode == "fp8":
            raise UsageError("--compile audits fp16 or bf16; fp8's layers are torchao's, not compared under compile")
        if self.plan is not None:
            from ..plan_format import load_plan

            plan = load_plan(self.plan)
            if self.what_if or plan.default != mode:
                raise UsageError(f"an audit under a plan audits the plan's default mode ({plan.default}); "
                                 f"received mode {mode!r}{' with --what-if' if self.what_if else ''}")
            object.__setattr__(self, "plan", plan.to_dict())
        int_in(self.steps, "--steps", 1, MAX_AUDIT_STEPS)
        int_in(self.seed, "seed", 0, 2**32 - 1)
        int_in(self.batch_size, "--batch-size", 1, MAX_BATCH)
        int_in(self.num_classes, "--num-classes", 1, MAX_CLASSES)
        float_in(self.loss_scale, "--loss-scale", 0, MAX_LOSS_SCALE, lo_open=True)
        if mode in ("bf16", "fp8") and self.loss_scale is not None and self.loss_scale != 1.0 and not self.what_if:
            raise UsageError(f"{mode} trains without loss scaling; --loss-scale applies to fp16 only")
        float_in(self.timeout, "--timeout", 0, MAX_TIMEOUT_S, lo_open=True)
        from ..workload_sizes import check_flag_values, size_kwargs

        check_flag_values(self.seq_len, self.image_size)
        if self.workload and self.model:
            raise UsageError("give either --workload or --model, not both")
        if self.model:
            size_kwargs("", None, self.model, self.seq_len, self.image_size)  # sizes are for built-ins only
        if self.data is not None:
            from ..factory import split_spec

            split_spec(self.data, "--data")
        if self.input_shape and math.prod(self.input_shape) > MAX_SAMPLE_ELEMENTS:
            shape = ",".join(map(str, self.input_shape))
            raise UsageError(f"--input-shape {shape} is {math.prod(self.input_shape):,} values per sample; "
                             f"at most {MAX_SAMPLE_ELEMENTS:,} are accepted")
