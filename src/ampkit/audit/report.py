"""The audit's document: per-layer statistics, findings and the report (``ampkit audit --json``)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from ..display import ResultDisplay
from ..envelope import NUM, OPT_NUM, DocumentError, Enveloped, check, check_rows, envelope, known
from ..formats import FloatFormat
from ..words import SEVERITY, SEVERITY_LABEL

#: how each low-precision format's tensors name their dtype (torch and TensorFlow alike)
DTYPE_NAME = {"fp16": "float16", "bf16": "bfloat16"}
FINDING_KINDS = ("overflow", "underflow", "nonfinite", "precision", "contract", "compile")
#: the contract's keys (and types) of an audit document, its layers and findings; the rest is optional
SCHEMA = {"mode": str, "loss_scale": NUM, "layers": list, "first_nonfinite": (dict, type(None)), "findings": list}
LAYER_SCHEMA = {"name": str, "type": str, "fwd_amax": OPT_NUM, "fwd_headroom_log2": OPT_NUM,
                "fwd_underflow_frac": OPT_NUM, "fwd_nonfinite": OPT_NUM, "grad_underflow_frac": OPT_NUM,
                "grad_nonfinite": OPT_NUM}
FINDING_SCHEMA = {"layer": str, "kind": str, "advice": str}
FIRST_SCHEMA = {"name": str, "phase": str}
#: how the documents name the root module (the whole model), whose own name is ""
ROOT = "(model)"


@dataclass
class LayerStats:
    name: str
    type: str
    fwd_amax: float = 0.0
    fwd_headroom_log2: float = math.inf
    fwd_underflow_frac: float = 0.0
    fwd_nonfinite: int = 0
    grad_amax: float = 0.0
    grad_underflow_frac: float = 0.0
    grad_nonfinite: int = 0
    grad_headroom_log2: float = math.inf   # at the loss scale
    fwd_lost_frac: float = 0.0             # share of nonzero outputs flushed or left with < LOST_BITS bits
    grad_lost_frac: float = 0.0            # the same for gradients, at the loss scale
    rel_error: float | None = None         # audited output vs the fp32 reference (max over calls)
    input_rel_error: float | None = None   # its inputs likewise, measured where rel_error is large for the format
    fwd_dtype: str | None = None           # dtype(s) of its outputs in the audited mode ("float16", "float32,float16")
    calls: int = 0
    leaf: bool = True
    fp8: dict | None = None                # --mode fp8: the Linear's fp8 errors, casts and advice (torch audit_fp8)
    # its own parameters' gradients (what the scaler checks before the optimizer; None: it has none, or not measured)
    param_grad_amax: float | None = None           # the float32 reference's, max over its parameters
    param_grad_headroom_log2: float | None = None  # log2(format max / (amax * loss scale))
    param_grad_nonfinite: int = 0                  # inf/NaN in its parameters' gradients at the audited loss scale
    #: {"params": [qualified names], "loss_scale": S}: parameters whose gradient was inf/NaN in a measured pass
    #: (at the audited scale or one the scaler backed off from), S the largest such scale
    param_grad_overflow: dict | None = None
    #: ||its parameters' unscaled gradients - the float32 reference's|| / ||reference's||: what the optimizer
    #: gets, the measure of whether a gradient underflow matters (None: not measured)
    param_grad_rel_error: float | None = None
    #: of its nonzero float32 output gradients, the share that is rounding noise (off by half or more from a
    #: float64 pass), and the share that is not noise yet lost at the loss scale; None: not checked (checked
    #: only where the gradients' lost share is large enough for a finding)
    grad_noise_frac: float | None = None
    grad_signal_lost_frac: float | None = None
    # accumulators (not serialised)
    _fwd_nz: float = field(default=0.0, repr=False)
    _fwd_under: float = field(default=0.0, repr=False)
    _grad_nz: float = field(default=0.0, repr=False)
    _grad_under: float = field(default=0.0, repr=False)
    _fwd_lost: float = field(default=0.0, repr=False)
    _grad_lost: float = field(default=0.0, repr=False)

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if not k.startswith("_")}

    def count_forward(self, nonzero: float, under: float, lost: float | None = None) -> None:
        """``under``: nonzero values below the smallest normal; ``lost``: below :func:`lost_below`
        (a backend that does not count it passes None: every underflowing value counts as lost)."""
        self._fwd_nz += nonzero
        self._fwd_under += under
        self._fwd_lost += under if lost is None else lost

    def count_grad(self, nonzero: float, under: float, lost: float | None = None) -> None:
        self._grad_nz += nonzero
        self._grad_under += under
        self._grad_lost += under if lost is None else lost

    def in_format(self, fmt: FloatFormat) -> bool:
        """Whether its outputs (so the gradients w.r.t. them) are held in ``fmt`` in the audited mode:
        a module that autocast runs in float32, or whose output type promotion makes float32, has
        no fp16 range to overflow or underflow (unknown: assumed in the format)."""
        return self.fwd_dtype is None or DTYPE_NAME.get(fmt.name, fmt.name) in self.fwd_dtype.split(",")

    def finish(self, fmt: FloatFormat) -> None:
        """Derive headroom and underflow shares from what was accumulated over the audited steps."""
        self.fwd_headroom_log2 = fmt.headroom_log2(self.fwd_amax)
        self.fwd_underflow_frac = float(self._fwd_under / self._fwd_nz) if self._fwd_nz else 0.0
        self.grad_underflow_frac = float(self._grad_under / self._grad_nz) if self._grad_nz else 0.0
        self.fwd_lost_frac = float(self._fwd_lost / self._fwd_nz) if self._fwd_nz else 0.0
        self.grad_lost_frac = float(self._grad_lost / self._grad_nz) if self._grad_nz else 0.0


@dataclass
class Finding:
    """One thing the audit found. ``code``, when set, is the fix as code in the framework's own
    syntax (it parses as Python); ``advice`` says the same in words."""

    layer: str
    kind: str
    advice: str
    severity: int = 0
    code: str | None = None
    cause: dict | None = None   # {"name", "why"}: the upstream module where it began (issue #34)

    @property
    def level(self) -> str:
        """``error`` (non-finite, overflow), ``warning`` (underflow, contract) or ``note`` (precision)."""
        return SEVERITY_LABEL.get(self.severity, "note")

    def to_dict(self) -> dict:
        out = {"layer": self.layer, "kind": self.kind, "severity": self.level, "advice": self.advice,
               "code": self.code}
        if self.cause is not None:
            out["cause"] = dict(self.cause)
        return out


@dataclass
class AuditReport(Enveloped, ResultDisplay, command="audit"):
    """One audit's result: the per-layer statistics, the findings with advice, and how the run went
    (the JSON document's keys, :data:`SCHEMA`; ``from_dict`` reads it back)."""

    mode: str
    loss_scale: float
    layers: list[LayerStats]
    first_nonfinite: dict | None
    findings: list[Finding]
    device: str
    steps: int
    environment: dict = field(default_factory=dict)
    workload: str | None = None
    reference_nonfinite: bool = False
    suggested_loss_scale: float | None = None
    resolved_from: str | None = None   # "auto" when --mode auto chose the audited mode
    note: str | None = None            # what auto resolved to and why this mode was audited
    interrupted: bool = False          # Ctrl-C or SIGTERM stopped the run; the statistics cover steps_completed
    steps_completed: int | None = None  # audited steps that finished (None: all of them)
    initial_loss_scale: float | None = None  # fp16 without a fixed scale: where the scaler started...
    skipped_steps: int = 0                   # ...and the steps it skipped (halving) before loss_scale
    what_if: dict | None = None              # --what-if: {format: prediction} (ampkit.audit.whatif)
    #: what the audited batch's inputs were: {"kind": "token_ids" | "normal(0,1)" | "data" | "given" |
    #: "workload", "dtype", "shape", "min", "max", ...} ("range": [0, vocab) for token ids); None: not said
    input: dict | None = None
    error: str | None = None  # why the run was stopped before its steps finished (--timeout), else None

    @property
    def failed(self) -> bool:
        return self.first_nonfinite is not None or self.error is not None

    def to_dict(self) -> dict:
        return envelope("audit", self.environment, framework=self.framework, workload=self.workload,
                        device=self.device, mode=self.mode, loss_scale=self.loss_scale, steps=self.steps,
                        layers=[lay.to_dict() for lay in self.layers], first_nonfinite=self.first_nonfinite,
                        findings=[f.to_dict() for f in self.findings], reference_nonfinite=self.reference_nonfinite,
                        suggested_loss_scale=self.suggested_loss_scale, resolved_from=self.resolved_from,
                        note=self.note, interrupted=self.interrupted, steps_completed=self.completed,
                        initial_loss_scale=self.initial_loss_scale or self.loss_scale,
                        skipped_steps=self.skipped_steps, output_rel_error=self.output_rel_error,
                        **({"what_if": self.what_if} if self.what_if is not None else {}),
                        **({"input": self.input} if self.input is not None else {}),
                        **({"error": self.error} if self.error is not None else {}),
                        **({"verdict": "not_measured", "not_measured": self.not_measured} if self.not_measured else {}))

    @property
    def not_measured(self) -> str | None:
        """Why the audit observed nothing it could judge (then no "healthy" is said), else None: no
        step finished, or fp8 with no layer converted (nothing ran in fp8)."""
        if self.what_if is not None:
            return None  # the what-if says it per format
        if self.completed == 0:
            return "no audited step finished (the run was stopped first): nothing was observed"
        if self.mode == "fp8" and not any((lay.fp8 or {}).get("converted") for lay in self.layers):
            n = sum(1 for lay in self.layers if lay.fp8 is not None) or len(self.layers)
            return (f"none of the {n} Linear layer(s) was converted to fp8: nothing ran in fp8, so there is nothing to "
                    "judge (layers[i].fp8.reason says why each stayed in bf16)" if n else
                    "the model has no Linear layer for fp8 to convert: fp8 would change nothing here")

    @property
    def output_rel_error(self) -> float | None:
        """The relative error of the model's own output (the module that finished last: the root
        module in PyTorch, the output layer in Keras): what all the modules' errors add up to."""
        return self.layers[-1].rel_error if self.layers else None

    @property
    def completed(self) -> int:
        """Audited steps whose statistics the report holds."""
        return self.steps if self.steps_completed is None else self.steps_completed

    @classmethod
    def from_dict(cls, d: dict) -> AuditReport:
        """Raises :class:`~ampkit.envelope.DocumentError` for a malformed document."""
        check(d, SCHEMA)
        check_rows(d["layers"], LAYER_SCHEMA, "layers")
        check_rows(d["findings"], FINDING_SCHEMA, "findings", {"kind": FINDING_KINDS})
        if d["first_nonfinite"] is not None:
            check(d["first_nonfinite"], FIRST_SCHEMA, "first_nonfinite")
        layers = [LayerStats(**known(LayerStats, lay)) for lay in d["layers"]]
        findings = [Finding(f["layer"], f["kind"], f["advice"], SEVERITY.get(f["kind"], 9), f.get("code"),
                            f.get("cause"))
                    for f in d["findings"]]
        env = d.get("environment")
        what_if = d.get("what_if")
        if what_if is not None and not (isinstance(what_if, dict) and all(
                isinstance(p, dict) and isinstance(p.get("verdict"), str) for p in what_if.values())):
            raise DocumentError("what_if must map each format to a prediction with a verdict")
        return cls(d["mode"], d["loss_scale"], layers, d["first_nonfinite"], findings, d.get("device", ""),
                   d.get("steps", 1), env if isinstance(env, dict) else {}, d.get("workload"),
                   d.get("reference_nonfinite", False), d.get("suggested_loss_scale"), d.get("resolved_from"),
                   d.get("note"), bool(d.get("interrupted", False)), d.get("steps_completed"),
                   d.get("initial_loss_scale"), d.get("skipped_steps") if isinstance(d.get("skipped_steps"), int) else 0,
                   what_if, d.get("input") if isinstance(d.get("input"), dict) else None,
                   d.get("error") if isinstance(d.get("error"), str) else None)


def merge_dtypes(layer: LayerStats, kinds) -> None:
    """Add the dtype names its outputs had in one audited pass to ``layer.fwd_dtype`` ("float16",
    "float32,float16": sorted, each once)."""
    seen = set(layer.fwd_dtype.split(",")) if layer.fwd_dtype else set()
    layer.fwd_dtype = ",".join(sorted(seen | set(kinds)))
