"""``ampkit audit``'s one flow, for every framework: the backend measures, this decides.

:func:`run` (the CLI) isolates the whole audit in a child process -- a user's model that crashes,
exits or runs out of memory ends as one line -- and on Ctrl-C or SIGTERM keeps the audited steps
that finished (:class:`~ampkit.isolation.PartialResult`). :func:`audit_here` is the flow itself,
in this process (the child's body, and the library's for a live model): ``auto``, the default
workload, the session (:class:`~ampkit.audit.ops.AuditSession`), the step loop and the report.

The step loop (:func:`run_session`) follows dynamic loss scaling as a default run does: in fp16
without a fixed ``--loss-scale``, a step whose scaled gradients alone overflow (forward and fp32
reference finite) is the step GradScaler / LossScaleOptimizer skips while halving the scale, so the
audit halves it too, measures the step again, and audits the scale a default run trains at.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..errors import UsageError
from ..factory import class_count_hint
from ..formats import format_of
from ..isolation import PartialResult, TimedOut, run_isolated, stop_requested, tell_parent
from ..registry import backend_spec, child_spec_backend
from ..workload_sizes import size_kwargs
from .config import AuditConfig
from .core import audit_mode_for_auto, backoff_note, findings_for
from .fp8 import fp8_findings
from .gradients import backoff_params, scale_that_fits
from .ops import FLAG, UNSUPPORTED, AuditSession, LiveModel, WhatIfSession, session_kind
from .progress import PassLines, quiet
from .report import ROOT, AuditReport

__all__ = ["STOP_GRACE_S", "audit_here", "run", "run_session"]

#: after Ctrl-C or SIGTERM, how long the audit may take to finish its current step and answer
STOP_GRACE_S = 60.0


def run(config: AuditConfig, backend, progress: bool = False) -> AuditReport:
    """The audit in a child process (``config.timeout``); raises :class:`PartialResult` holding the
    finished steps' report (marked interrupted) when Ctrl-C or SIGTERM stopped it. Past the timeout
    the child is asked to stop the same way and the report comes back marked ``interrupted`` with
    ``error`` saying why (a report of no step when the child did not answer: ``not_measured``).
    ``progress``: a line per pass on stderr (:mod:`.progress`). ``backend``: a Backend, or what
    :func:`ampkit.registry.child_backend` names (the child then resolves and imports the framework)."""
    what = f"auditing {config.model or config.workload or 'the default workload'}"
    try:
        spec = backend if isinstance(backend, str) else backend_spec(backend)  # a str: registry.child_backend's
        return run_isolated(_in_child, spec, config, progress, what=what, timeout=config.timeout,
                            keep_partial=STOP_GRACE_S)
    except PartialResult as stopped:
        stopped.result.interrupted = True  # stopped as its last step finished: still a stopped command
        raise
    except TimedOut as late:  # as bench's timed-out mode: a document that says so, with what finished
        report = late.result if late.result is not None else _nothing_finished(config)
        report.interrupted, report.error = True, str(late)
        return report


def _nothing_finished(config: AuditConfig) -> AuditReport:
    """The report of an audit stopped before it could answer: no step, no verdict (not_measured)."""
    return AuditReport("fp32" if config.what_if else config.mode, float(config.loss_scale or 1.0), [], None, [],
                       config.device, config.steps, workload=config.model or config.workload, steps_completed=0)


def _in_child(spec: str, config: AuditConfig, progress: bool = False) -> AuditReport:
    return audit_here(config, child_spec_backend(spec), progress=PassLines() if progress else None)


def audit_here(config: AuditConfig, backend, live: LiveModel | None = None, progress=None) -> AuditReport:
    """The audit in this process: ``live``'s model when given, else the config's workload or model.
    ``progress(text)``: called once per pass (None: silent)."""
    say = progress or quiet
    target = backend.target(config.device)
    auto_note = None  # (a what-if run's mode is always the float32 reference's fp16: neither auto nor fp8)
    if config.mode == "auto":
        mode, auto_note = audit_mode_for_auto(lambda: backend.resolve_auto(target))
        config = replace(config, mode=mode)  # checked again: auto's bf16 with a --loss-scale is refused
    if config.mode == "fp8":  # trained by the framework's engine, or said why not
        ok, _, why = backend.training_support("fp8", target)
        if not ok:
            raise UsageError(f"--mode fp8 cannot run on {target.label} with {backend.name}: {why}")
    kind = session_kind(config)  # which session: the one table is the backend's audit_sessions
    if kind not in backend.audit_sessions:
        raise UsageError(f"{FLAG[kind]} is not available for --framework {backend.name}: {UNSUPPORTED[kind]}")
    if live is None and not config.model:
        name = backend.check_workload(config.workload or backend.default_workload(target))
        size_kwargs(backend.name, name, None, config.seq_len, config.image_size)  # a size it does not take
        config = replace(config, workload=name)
    try:
        session = backend.audit_session(config, target, live)
        tell_parent("started")  # the model is built: past --timeout from here the run keeps a document
        try:
            fed = session.input  # what the batch was (ampkit.audit.ops.AuditSession.input)
            if config.data and (fed or {}).get("kind") != "data":  # never a silent default batch instead
                raise UsageError(f"--data is not available for --framework {backend.name} yet: its audit session "
                                 "does not read the user's batch")
            report = run_whatif(session, config, say) if kind == "what_if" else run_session(session, config, say)
            report.input = fed
        finally:
            session.close()
        refind = report.__dict__.pop("_refind", None)
        if refind is not None and offers_bf16(report) and not report.interrupted:  # is bf16 a cure here? its own audit says (issue #46)
            unhealthy, said = bf16_verdict(backend, config, target, live, say)
            if unhealthy:
                report.findings = refind(unhealthy)
            report.note = "; ".join(n for n in (report.note, said) if n)
    except UsageError:
        raise
    except Exception as exc:  # a user's model that fails under the audit: one line, as bench's probe says it
        if config.model:
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            hint = class_count_hint(str(exc), config.num_classes)
            raise UsageError(f"{config.model} failed under audit: {type(exc).__name__}: {first}{hint}") from exc
        raise
    if auto_note:
        report.resolved_from = "auto"
        report.note = "; ".join(n for n in (auto_note, report.note) if n)
    return report


#: the kinds of finding that say a mode's own numerics fail on a model (not contract or compile findings)
NUMERIC_KINDS = ("nonfinite", "overflow", "underflow", "precision")


def offers_bf16(report: AuditReport) -> bool:
    """Whether an fp16 report's findings offer bf16 as a cure (words or code)."""
    return report.mode == "fp16" and any("bf16" in f.advice or "bf16" in (f.code or "") for f in report.findings)


def bf16_verdict(backend, config: AuditConfig, target, live, say=quiet) -> tuple[str | None, str]:
    """A bf16 audit of the same model, batch and steps: (why bf16 is no cure, naming its first finding, or
    None when it is healthy -- no numeric finding, no inf/NaN -- or cannot run here; the report's note)."""
    cfg = replace(config, mode="bf16", loss_scale=None, compile=False)
    try:
        session = backend.audit_session(cfg, target, live)
    except UsageError as exc:  # a backend or device without bf16: the findings stay as they are, said so
        return None, f"bf16 not audited here ({exc})"
    try:
        rep = run_session(session, cfg, say)
    finally:
        session.close()
    bad = [f for f in rep.findings if f.kind in NUMERIC_KINDS]
    if not bad and rep.first_nonfinite is None:
        return None, "bf16 audited too: healthy on this model"
    f = bad[0] if bad else None
    where = f"{f.kind} at {f.layer or ROOT}" if f else f"inf/NaN first in {rep.first_nonfinite['name']}"
    why = f"its own audit of this model finds {where}"
    return why, f"bf16 audited too: not advised, {why}"


def run_session(session: AuditSession, config: AuditConfig, say=quiet) -> AuditReport:
    """``config.steps`` audited steps of an open session (``config.mode`` fp16 or bf16), then the
    findings and the report. A stop request between steps ends the loop with what finished."""
    mode, fmt = config.mode, format_of(config.mode)
    scale_fixed = config.loss_scale is not None
    scale = float(config.loss_scale) if scale_fixed else (float(session.initial_scale) if mode == "fp16" else 1.0)
    initial_scale, backoffs, done = scale, 0, 0
    first_nonfinite, reference_nonfinite = None, False
    for step in range(config.steps):
        if stop_requested():  # Ctrl-C or SIGTERM of ampkit: keep the steps that finished
            break
        outcome = session.measure(step, scale)
        say(_pass_line(step, config, scale, outcome))
        # GradScaler's / LossScaleOptimizer's own start: gradients that overflow only at the scale
        # make it skip the step and halve the scale; unless the scale was given, the audit does too
        if mode == "fp16" and not scale_fixed and _backs_off(outcome):
            scale, outcome = back_off(session, step, scale, outcome, fmt.max_finite,
                                      lambda s, o, step=step: say(_pass_line(step, config, s, o)))
            backoffs = round(math.log2(initial_scale / scale))
        session.record()
        session.train(scale)
        reference_nonfinite = reference_nonfinite or outcome.reference_nonfinite
        if first_nonfinite is None and outcome.first_nonfinite is not None:
            # "op" and "in_reference" (issue #34) as the backend says, else: no op, the reference's verdict
            first_nonfinite = {"op": None, "in_reference": outcome.reference_nonfinite, **outcome.first_nonfinite,
                               "step": step}
        done += 1
    layers = session.layers() if done else []
    for lay in layers:
        lay.finish(fmt)
    advice = session.advice()
    findings, suggested = findings_for(layers, fmt, mode, scale, first_nonfinite, reference_nonfinite, advice)
    numeric = len(findings)
    first_seen = dict(first_nonfinite) if first_nonfinite is not None else None
    findings += session.contract_findings()  # the precision contract (issue #22); none by default
    if mode == "fp8":  # each converted layer's own advice (ampkit.audit.fp8)
        findings = fp8_findings(layers) + findings
    if first_nonfinite is not None and not first_nonfinite["name"]:  # the root module: named, never ""
        first_nonfinite["name"] = ROOT
    report = AuditReport(mode, scale, layers, first_nonfinite, findings, session.device, config.steps,
                         session.environment(), session.workload, reference_nonfinite, suggested,
                         interrupted=stop_requested(), steps_completed=done)
    notes = list(session.notes)
    if config.compile:  # --compile: eager vs torch.compile per module; unsupported by default (ops.AuditSession)
        more, note = session.compile_findings()
        findings += more
        notes += [note] if note else []
    if backoffs:
        report.initial_loss_scale, report.skipped_steps = initial_scale, backoffs
        notes.insert(0, backoff_note(advice.scaler, initial_scale, scale, backoffs, backoff_params(layers)))
    forward_failed = reference_nonfinite or (first_nonfinite or {}).get("phase") == "forward"
    report.suggested_loss_scale = scale_that_fits(layers, fmt, mode, scale, backoffs, suggested, forward_failed)
    report.note = "; ".join(notes) or None
    report.input = session.input  # what the batch was drawn as, when the backend says
    if mode == "fp16":  # the findings again once bf16's own verdict is known (audit_here): not serialised
        report.__dict__["_refind"] = lambda unhealthy: findings_for(
            layers, fmt, mode, scale, first_seen, reference_nonfinite, advice, unhealthy)[0] + findings[numeric:]
    return report


def run_whatif(session: WhatIfSession, config: AuditConfig, say=quiet) -> AuditReport:
    """``--what-if``: ``config.steps`` float32 steps of a session that observes (``session.observe``),
    then the predictions per format (:mod:`.whatif`) with the framework's advice. A stop request
    between steps ends the loop with what finished."""
    from .whatif import FORMAT_OF, predict
    from .whatif_advice import add_advice

    done = 0
    for step in range(config.steps):
        if stop_requested():
            break
        session.observe(step)
        say(f"what-if: float32 step {step + 1}/{config.steps} observed")
        done += 1
    mods = session.summaries() if done else []
    default = float(session.initial_scale)
    scale = float(config.loss_scale) if config.loss_scale is not None else default
    advice = session.advice()
    predictions = predict(mods, config.formats, scale, default, session.scale_limit)
    add_advice(predictions, advice)
    layers = [_layer(m, scale) for m in mods]
    for lay in layers:
        lay.finish(FORMAT_OF["fp16"])
    report = AuditReport("fp32", scale, layers, None, [], session.device, config.steps, session.environment(),
                         session.workload, interrupted=stop_requested(), steps_completed=done)
    report.what_if = predictions
    report.input = session.input
    report.note = "; ".join(["what-if: float32 steps only; fp16, bf16 and fp8 predicted from them", *session.notes])
    return report


#: the back-off gives up below this scale (a gradient that overflows there is no scale problem); a session's
#: ``scale_floor`` (its framework scaler's own lowest scale) raises it
MIN_SCALE = 2.0**-64


def _backs_off(outcome) -> bool:
    return outcome.skips and not outcome.forward_nonfinite and not outcome.reference_nonfinite


def back_off(session: AuditSession, step: int, scale: float, outcome, max_finite: float, say=lambda s, o: None):
    """The scale a dynamic scaler ends its back-off at, from ``scale`` (measured: it skips), and the
    outcome measured there. A real scaler halves once per skipped step, below 1 too (GradScaler has no
    floor), so the scales tried are ``scale / 2**k``; the audit does not run each: from the largest
    float32 gradient (``outcome.grad_amax``) it predicts the first ``k`` whose scaled gradients fit, measures
    there, halves on while that skips, and checks that the scale above the one it settles at skips (else
    the scaler would have stopped there): two measured steps when the prediction holds. Each measurement
    is a real audited step; the last one is at the returned scale. Without ``grad_amax`` it halves one
    step at a time. A session whose framework's scaler stops at a floor (tf_keras's LossScaleOptimizer
    at 1) says so in ``scale_floor``; there the back-off stops too."""
    lowest = max(MIN_SCALE, session.scale_floor or 0.0)  # declared by the protocol (AuditSession)
    skip_at = scale  # the lowest scale measured to skip
    amax = outcome.grad_amax
    k = max(1, math.ceil(math.log2(amax * scale / max_finite))) if amax and math.isfinite(amax) and amax > 0 else 1
    cand = max(scale / 2.0**k, lowest)

    def measure(s):
        session.rewind()
        out = session.measure(step, s)
        say(s, out)
        return out

    while True:
        up = cand * 2
        if up < skip_at:  # the scale above the predicted one first: it must skip for the scaler to come down here
            outcome = measure(up)
            if not _backs_off(outcome):  # predicted too far down
                if outcome.skips or up * 2 >= skip_at:
                    return up, outcome
                cand = up
                continue
            skip_at = up
        outcome = measure(cand)
        if not _backs_off(outcome) or cand / 2 < lowest:
            return cand, outcome
        skip_at, cand = cand, cand / 2


def _pass_line(step: int, config: AuditConfig, scale: float, outcome) -> str:
    """One pass said in words: the step, the mode and scale, and what a scaler would do with it."""
    at = f" at loss scale {scale:g}" if config.mode == "fp16" else ""
    seen = ("; inf/NaN in the forward" if outcome.forward_nonfinite else
            "; a gradient is inf/NaN: a scaler skips this step" if outcome.skips and config.mode == "fp16" else
            "; a gradient is inf/NaN" if outcome.skips else "")
    return f"step {step + 1}/{config.steps}: float32 reference and {config.mode}{at} measured{seen}"


def _layer(m, scale: float):
    """A what-if module as a report layer: float32 magnitudes, shares judged for fp16 at ``scale``."""
    from ..formats import lost_below
    from .report import LayerStats
    from .whatif import FORMAT_OF

    fmt = FORMAT_OF["fp16"]
    lay = LayerStats(m.name, m.type, fwd_amax=m.fwd.amax, grad_amax=m.grad.amax, calls=m.calls, leaf=m.leaf)
    lay.count_forward(m.fwd.nonzero, m.fwd.below(fmt.smallest_normal), m.fwd.below(lost_below(fmt)))
    lay.count_grad(m.grad.nonzero, m.grad.below(fmt.smallest_normal, scale), m.grad.below(lost_below(fmt), scale))
    lay.grad_headroom_log2 = fmt.headroom_log2(m.grad.amax * scale) if m.grad.amax else float("inf")
    return lay
