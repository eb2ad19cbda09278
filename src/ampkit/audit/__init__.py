"""``ampkit.audit(model_or_workload, batch=None, loss_fn=None, *, mode="fp16", ...)``: per-layer
numerics of a mixed-precision step against an fp32 reference.

This package holds the audit's one flow for every framework (:mod:`.driver`: the step loop, loss
scaling's back-off, the first inf/NaN, the report), its frozen config, statistics and findings;
each backend only measures (:mod:`.ops`). The module itself is callable, so
``ampkit.audit(model, batch)`` runs the audit whether or not this package has been imported --
PyTorch's or Keras's, as ``framework`` says (``auto``: the model's own);
``help(ampkit.audit)`` and ``inspect.signature(ampkit.audit)`` show its parameters.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

from .._callable import make_callable

if TYPE_CHECKING:
    from .report import AuditReport

__all__ = ["AuditConfig", "AuditReport", "Finding", "LayerStats", "audit"]


def audit(model_or_workload, batch=None, loss_fn=None, *, mode="fp16", loss_scale=None, steps=1, device="auto",
          lr=None, seed=0, what_if=False, formats=None, compile=False, plan=None, framework="auto",
          name=None) -> AuditReport:
    """Audit the numerics of ``mode`` layer by layer against an fp32 reference (PyTorch or Keras).

    The model runs twice per step on the same batch and weights -- an fp32 reference and the mode
    -- with hooks on every module: output and gradient amax, headroom, the share flushed to zero or
    subnormal (gradients at the loss scale), inf/NaN counts, the error against fp32, the first
    module holding inf/NaN, and findings with advice.

    Args:
        model_or_workload: an ``ampkit.Workload`` (its model, batch maker and loss are used), or
            a ``torch.nn.Module`` together with ``batch=(inputs, targets)`` and ``loss_fn``; for
            Keras, a zero-argument callable that builds the model (Keras 3 or tf_keras), called once
            per policy (float32 and ``mode``; once, under float32, for ``what_if``).
        batch: ``(inputs, targets)`` for a bare model (a Workload makes its own when omitted).
        loss_fn: ``loss_fn(output, targets) -> scalar`` (default: cross-entropy); for Keras,
            ``loss_fn(y_true, y_pred)`` (a ``keras.losses`` object), required.
        mode: ``fp16``, ``bf16`` (aliases accepted) or ``auto`` (auto's choice when it is fp16 or
            bf16, else bf16; the report's ``resolved_from`` and ``note`` say so).
        loss_scale: the fixed loss scale to audit at (default: the engine's initial scale,
            2**16 for fp16; 1 for bf16, which uses no scaling).
        steps: training steps to audit; the optimizer (AdamW) steps after each audited step.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        lr: the optimizer's learning rate between audited steps (default: the workload's).
        seed: step ``i`` runs both passes from seed ``seed + i`` (identical dropout masks).
        what_if: run float32 steps only and predict, per format and module, whether fp16, bf16
            and fp8 would work (``report.what_if``; ``mode`` is not used, ``loss_scale`` is the
            fp16 scale the gradient shares are given at). See ``ampkit.audit.whatif``.
        formats: the formats a what-if run predicts (default ``("fp16", "bf16", "fp8")``).
        compile: also run the forward under ``torch.compile`` in the mode and flag ("compile"
            findings) the modules whose output compilation changes beyond the mode's eager error.
        plan: a precision plan (path, dict or ``ampkit.plan.Plan``) the audited mode runs under
            (``mode`` is its default): the audit of the planned model. PyTorch.
        framework: ``auto`` (the model's framework: ``ampkit.backends.model_framework``),
            ``torch`` or ``tensorflow`` (alias ``keras``).
        name: the model's name in the report (Keras; default none).

    Returns:
        AuditReport: ``layers``, ``first_nonfinite``, ``findings`` (each with a severity);
        ``.to_dict()`` is the JSON document ``ampkit audit --json`` writes.
    """
    from ..errors import UsageError
    from ..registry import get_backend, model_framework
    from .config import WHAT_IF_FORMATS, AuditConfig
    from .driver import audit_here
    from .ops import LiveModel

    framework = model_framework(model_or_workload, batch, framework)
    if plan is not None and framework != "torch":
        raise UsageError(f"plan= is PyTorch-only in the audit; received a {framework} model (for Keras, "
                         "ampkit.keras.MixedPrecision.from_plan trains under a plan)")
    device = str(device) if hasattr(device, "type") else device  # a torch.device as its name
    config = AuditConfig(mode=mode, steps=steps, loss_scale=loss_scale, device=device, seed=seed, what_if=what_if,
                         formats=WHAT_IF_FORMATS if formats is None else formats, compile=compile,
                         plan=_plan_dict(plan))
    return audit_here(config, get_backend(framework), LiveModel(model_or_workload, batch, loss_fn, lr, name))


def _plan_dict(plan):
    if plan is None:
        return None
    from ..plan_format import load_plan

    return load_plan(plan, "torch").to_dict()


make_callable(__name__, audit, ("config", "report"))
#: ``inspect.signature(ampkit.audit)`` (the module is callable) is the function's, not ``(*args, **kwargs)``
__signature__ = inspect.signature(audit)
