"""What audit's driver (:mod:`ampkit.audit.driver`) asks of a framework backend: small typed operations.

Part of :class:`ampkit.backends.base.Backend`; the flow around them is the driver's, written once.
A backend opens an :class:`AuditSession` on one model and batch; the driver then runs, per step,
``measure`` (``rewind`` and ``measure`` again while loss scaling backs off), ``record`` and
``train``, and builds the report from ``layers``, ``advice`` and ``environment``. The loop, the
back-off, the first inf/NaN, the findings and the report are the driver's alone.

Which session an audit opens is one table: :func:`session_kind` names the kind a config asks for
(``plain``, ``fp8``, ``what_if``) and each backend's :attr:`AuditOps.audit_sessions` maps the kinds
it offers to its session classes; a kind it does not offer is refused with :data:`UNSUPPORTED`'s
reason. Optional parts of a session are declared here with their defaults (a session class
deriving from :class:`AuditSession` inherits them): no ``input`` record, no contract findings,
``--compile`` unsupported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..target import Target
    from .config import AuditConfig
    from .report import LayerStats



@dataclass(frozen=True)
class Advice:
    """How a framework says the fixes: keeping one layer in float32, and its loss scaler's names."""

    fp32_hint: Callable[[str], str]   # name -> code (valid Python, no backticks) keeping that module/layer in float32
    scaler: str                       # "GradScaler" / "LossScaleOptimizer"
    init_arg: str                     # "init_scale" / "initial_scale"
    scale_code: Callable[[float], str] | None = None   # scale -> code making the scaler start there
    bf16_code: str | None = None                       # code that trains in bf16 instead
    #: (names kept out of fp8, recipe or None) -> code training the rest in fp8 (what-if advice)
    fp8_code: Callable[[list, str | None], str] | None = None


@dataclass(frozen=True)
class LiveModel:
    """A model object handed to the library (``ampkit.audit(model, batch, loss_fn)``), audited in
    this process: the framework's model or workload (PyTorch), or a zero-argument builder of the
    model (Keras: it is built once per policy). ``batch``: ``(inputs, targets)``; ``lr``: the
    optimizer's learning rate between audited steps (None: the workload's or the backend's)."""

    model: Any
    batch: Any = None
    loss_fn: Any = None
    lr: float | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        import math

        from ..errors import UsageError

        if self.batch is not None and not (isinstance(self.batch, (tuple, list)) and len(self.batch) == 2):
            raise UsageError(f"batch must be (inputs, targets); received {type(self.batch).__name__}")
        if self.lr is not None and not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr >= 0):
            raise UsageError(f"lr must be a number >= 0 (0 keeps the weights); received {self.lr!r}")
        if self.loss_fn is not None and not callable(self.loss_fn):
            raise UsageError(f"loss_fn must be callable (logits, targets) -> loss; received {type(self.loss_fn).__name__}")


@dataclass(frozen=True)
class StepOutcome:
    """What one measured step saw: inf/NaN in the audited pass's forward, in its backward, in the
    float32 reference; and where the audited pass first held one (``{"name", "phase"}``: the
    forward's first, else the module whose backward produced it, with ``"param"`` when only a
    parameter's gradient held it), or None."""

    forward_nonfinite: bool
    backward_nonfinite: bool
    reference_nonfinite: bool
    first_nonfinite: dict | None = None
    #: whether a parameter's gradient held inf/NaN: exactly what makes the framework's scaler skip the
    #: step (GradScaler.unscale_, LossScaleOptimizer); None: not measured, ``backward_nonfinite`` stands for it
    params_nonfinite: bool | None = None
    #: the largest unscaled float32 reference gradient the scaled backward holds (w.r.t. a module's output
    #: or of a parameter), from which the audit predicts how far a scaler backs off; None: not measured
    grad_amax: float | None = None

    @property
    def skips(self) -> bool:
        """Whether a real fp16 step with a dynamic scaler skips this step."""
        return self.backward_nonfinite if self.params_nonfinite is None else self.params_nonfinite


@runtime_checkable
class AuditSession(Protocol):
    """One model and batch under audit, as a backend measures it.

    ``device``: the reports' device label; ``workload``: the workload's name (None for a bare
    model); ``initial_scale``: the framework scaler's default initial scale (an fp16 audit starts
    where a default run starts); ``notes``: what opening it decided (the batch it audits at).
    Optionally ``input``: what the audited batch's inputs were, for the document (``{"kind":
    "token_ids", "range": [0, vocab), "dtype", "shape", ...}``; kind ``"data"`` when it came from the
    user's ``config.data`` -- a session that does not read ``config.data`` leaves the run refused)."""

    device: str
    workload: str | None
    initial_scale: float
    notes: tuple[str, ...]
    #: what the audited batch was (see above); None: the session does not say
    input: dict | None = None
    #: the lowest scale the framework's scaler backs off to (tf_keras's LossScaleOptimizer: 1); None: no
    #: floor (GradScaler, Keras 3), the audit's back-off follows it below 1 (ampkit.audit.driver.back_off)
    scale_floor: float | None = None

    def measure(self, step: int, scale: float) -> StepOutcome:
        """Step ``step``'s fp32 reference and audited pass at loss scale ``scale``, from the same
        weights and random numbers; nothing is added to the statistics yet."""

    def rewind(self) -> None:
        """Undo the measured step (its gradients, updated buffers): it will be measured again."""

    def record(self) -> None:
        """Add the measured step's statistics to the layers."""

    def train(self, scale: float) -> None:
        """One training step in the mode at ``scale``: later steps see later weights."""

    def layers(self) -> list[LayerStats]:
        """Every module/layer that ran, in execution order, with what :meth:`record` added."""

    def advice(self) -> Advice:
        """How this framework words the fixes (float32 for one layer, its loss scaler's names)."""

    def environment(self) -> dict:
        """The report's environment section (the framework flavour that ran included)."""

    def close(self) -> None:
        """Give the model back as it came (parameters, buffers, gradients, train/eval mode)."""

    # ---------------------------------------------------------------- optional, declared with their defaults
    def contract_findings(self) -> list:
        """Findings of kind ``"contract"`` (the precision contract, issue #22: a low-precision output
        layer, float16 variables). Default: none, this session checks no contract."""
        return []

    def compile_findings(self) -> tuple[list, str | None]:
        """``--compile``: the modules whose output compilation changes beyond the mode's eager error,
        and a note. Default: unsupported, because only torch.compile is compared against eager."""
        from ..errors import UsageError

        raise UsageError("audit --compile is PyTorch-only")


@runtime_checkable
class WhatIfSession(AuditSession, Protocol):
    """The session of kind ``what_if``: float32 steps observed (``observe``) and summarized per module
    (``summaries``, :class:`ampkit.audit.whatif.ModuleSummary`); ``scale_limit``: the largest loss
    scale the framework's scaler reaches (None: the format's own limit)."""

    scale_limit: float | None = None

    def observe(self, step: int) -> None:
        """One float32 training step, its module outputs and gradients summarized."""

    def summaries(self) -> list:
        """Every module observed, in execution order."""


#: the session kinds an audit may ask for, and why a backend without one cannot run it
UNSUPPORTED = MappingProxyType({
    "plain": "its backend opens no audit session",
    "fp8": "its audit session has no fp8 layers to compare against bf16 and fp32",
    "what_if": "its audit session cannot observe float32 steps",
})
#: how the driver's message names each kind
FLAG = MappingProxyType({"plain": "audit", "fp8": "--mode fp8", "what_if": "--what-if"})


def session_kind(config: AuditConfig) -> str:
    """The kind of session ``config`` asks for: ``what_if`` (float32 steps, predictions), ``fp8``
    (the converted layers against bf16 and fp32) or ``plain`` (fp16/bf16 against float32)."""
    if config.what_if:
        return "what_if"
    return "fp8" if config.mode == "fp8" else "plain"


@runtime_checkable
class AuditOps(Protocol):
    #: the one table of the sessions this backend opens, by :func:`session_kind`: kind -> the class
    #: (or callable) ``audit_session`` opens. Default: none (every audit is refused, saying why)
    audit_sessions: Mapping[str, Any] = MappingProxyType({})

    def audit_session(self, config: AuditConfig, target: Target, live: LiveModel | None = None) -> AuditSession:
        """Open a session: ``live``'s model when given, else the config's ``workload`` (already
        checked and resolved by the driver) or ``model`` (MODULE:FACTORY), with ``config.mode``
        fp16, bf16 or fp8 (``auto`` resolved), at ``config.batch_size``, sized by ``seq_len``/``image_size``;
        the session is ``audit_sessions[session_kind(config)]``'s (the driver checked that it exists)."""
