"""What a trainer callback keeps, framework-neutral: the skip ledger, the pre-failure ring buffer,
the scheduler check and the documents it writes.

It is fed plain host values, one :class:`StepRow` per optimizer step, by the framework side (the
torch watch of the HuggingFace and Lightning callbacks, the Keras callback), at syncs that already
happen; it never touches a device. On the first step with a non-finite loss, module output or
gradient it names the first module and phase that went non-finite and writes an ``audit``
document (``ampkit report`` reads it) holding the last K steps; at the end of training it writes
the summary into the same document."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import warnings
from collections import deque

from ..display import ResultDisplay
from ..envelope import envelope
from ..formats import FORMATS
from ..health import LossScaleHealth
from .failure import FailureStory, StepRow, _bad, _fmt, _num, rank_path  # noqa: F401 (the record's API)

__all__ = ["StepRow", "TrainRecord", "SchedulerStepWarning", "DEFAULT_K"]

DEFAULT_K = 8
log = logging.getLogger("ampkit.integrations")


class SchedulerStepWarning(UserWarning):
    """An LR scheduler advanced on an optimizer step that the loss scaler skipped."""


class TrainRecord(FailureStory, ResultDisplay, command="callback"):
    """One training run's ledger, ring buffer, alarms and documents.

    Args:
        source: who speaks ("AmpkitCallback (transformers Trainer)").
        trainer: the trainer's package and version ("transformers 5.24.0"), named in warnings.
        k: how many steps the ring buffer keeps before a failure.
        json_path: where the document goes (the first failure, then the summary); None: the first
            failure goes to ``fallback_dir``/ampkit_first_failure.json (the trainer's output folder),
            or stays in memory (:meth:`document`) without one; no summary file is written.

    In a notebook, ``callback.record`` shows its summary line and the audit section of its document
    (:class:`~ampkit.display.ResultDisplay`); ``to_pandas()`` gives a row per watched layer.
    """

    def __init__(self, *, source: str, trainer: str, k: int = DEFAULT_K, json_path: str | None = None,
                 fallback_dir: str | None = None, min_scale_warning: float = 1.0,
                 consecutive_skip_warning: int = 10, workload: str | None = None,
                 health: LossScaleHealth | None = None) -> None:
        self.source, self.trainer, self.k = source, trainer, int(k)
        self.json_path, self.fallback_dir, self.workload = json_path, fallback_dir, workload
        # a caller that feeds an alarm of its own (the Keras loss-scale history) passes it: read, not fed
        self._feed_health = health is None
        self.health = health or LossScaleHealth(min_scale_warning=min_scale_warning,
                                      consecutive_skip_warning=consecutive_skip_warning, source=source,
                                      advice=("Use bf16 where the device supports it (no loss scaling needed), "
                                              "or find the overflowing module with `ampkit audit --mode fp16`."))
        self.fwd_modules: list[tuple[str, str]] = []   # (name, type) in execution order
        self.grad_modules: list[str] = []              # modules holding parameters, in execution order
        self.ring: deque[StepRow] = deque(maxlen=self.k)
        self.steps = 0
        self.skipped: list[int] = []
        self.scales: list[float] = []                  # the scale after each step (scaler runs)
        self.initial_scale: float | None = None
        self.warnings: list[str] = []
        self.findings: list[dict] = []
        self.first: dict | None = None
        self.failure_rows: list[StepRow] = []
        self.failure_path: str | None = None
        self.mode = "fp32"                             # what runs: fp32, bf16, fp16
        self.declared: str | None = None
        self.scaler = False
        self.environment: dict = {}
        self.device = "cpu"
        self._prev: StepRow | None = None
        self._sched_fired = False
        self.sched_advanced_on_skip: list[int] = []
        #: why the scheduler stepped (the trainer's habit), for the warning
        self.scheduler_cause = f"{trainer} steps its schedulers after every step, skipped or not"
        #: this process's rank and the number of processes (a multi-process run: only rank 0 speaks)
        self.rank: int | None = None
        self.world = 1
        #: what the callback cannot see (a visible line and the document's ``not_watched``)
        self.not_watched: list[str] = []
        self.framework: str | None = None              # None: torch, or tensorflow for a Keras trainer
        self.extra: dict = {}                          # more of the document (a rank's role in the run)

    @property
    def quiet(self) -> bool:
        """A rank other than 0 of a multi-process run: it records, rank 0 speaks for the run."""
        return self.world > 1 and bool(self.rank)

    def say(self, line: str) -> None:
        """One line to the log: a warning on rank 0 (or alone), debug on other ranks."""
        log.debug(line) if self.quiet else log.warning(line)

    # ------------------------------------------------------------------ set-up
    def set_modules(self, fwd: list[tuple[str, str]], grad: list[str]) -> None:
        self.fwd_modules, self.grad_modules = list(fwd), list(grad)

    def precision(self, *, declared: str, setting: str, mode: str, scaler: bool, why: str = "") -> str | None:
        """Record what runs; returns (and logs, once) the one line that says so when it is not what
        ``setting`` declared (``declared`` is that setting's mode: fp16, bf16, fp32)."""
        self.declared, self.mode, self.scaler = declared, mode, scaler
        runs = {"fp32": "float32 (no autocast, no GradScaler)", "bf16": "bf16 autocast (bfloat16, no loss scaling)",
                "fp16": "fp16 autocast with a GradScaler" if scaler else "fp16 autocast WITHOUT loss scaling"}[mode]
        if declared == mode and (mode != "fp16" or scaler):
            return None
        line = f"{self.source}: {setting} declares {declared}, but this run trains in {runs}{why}."
        self.warn_line(line)
        self.findings.append({"layer": "", "kind": "contract", "severity": "warning", "advice": line, "code": None})
        return line

    def warn_line(self, line: str) -> None:
        if line not in self.warnings:
            self.warnings.append(line)
            self.say(line)

    def contract(self, findings: list[dict]) -> None:
        """Per-parameter dtype findings (``{"where", "expected", "actual", "advice"}``) as contract findings."""
        for f in findings:
            advice = f"expected {f.get('expected')}, found {f.get('actual')}: {f.get('advice', '')}"
            self.findings.append({"layer": str(f.get("where", "")), "kind": "contract", "severity": "warning",
                                  "advice": advice, "code": None})
            self.warn_line(f"{self.source}: precision contract: {f.get('where', '')}: {advice}")

    # ------------------------------------------------------------------ feeding
    def add(self, row: StepRow) -> bool:
        """One step, in order. True when it is the run's first failure (its document is written)."""
        self.steps += 1
        if row.scale is not None:
            if self.initial_scale is None:
                self.initial_scale = row.scale_used if row.scale_used is not None else row.scale
            self.scales.append(row.scale)
            with warnings.catch_warnings():
                if self.quiet:
                    warnings.simplefilter("ignore")
                msg = self.health.observe(row.step, row.scale, row.skipped, scale_used=row.scale_used) \
                    if self._feed_health else None
            if msg:
                self.warnings.append(msg)
        if row.skipped:
            self.skipped.append(row.step)
        self._check_scheduler(row)
        self._prev = row
        self.ring.append(row)
        if self.first is None and self._failed(row):
            self._failure(row)
            return True
        return False

    def finish(self, sched_now: tuple = ()) -> None:
        """The end of training: the last step's scheduler counters are compared with ``sched_now``."""
        if self._prev is not None and sched_now:
            self._check_scheduler(StepRow(self._prev.step + 1, None, [], [], sched=tuple(sched_now)))

    def _check_scheduler(self, row: StepRow) -> None:
        prev = self._prev
        if prev is None or not prev.skipped or not prev.sched or len(prev.sched) != len(row.sched):
            return
        if any(b > a for a, b in zip(prev.sched, row.sched)):
            self.sched_advanced_on_skip.append(prev.step)
            if not self._sched_fired:
                self._sched_fired = True
                msg = (f"{self.source}: the LR scheduler advanced on step {prev.step}, which the loss scaler skipped "
                       f"for inf/NaN gradients ({self.scheduler_cause}): the learning rate now runs ahead of the "
                       f"optimizer's real steps (pytorch #44511, Lightning #18828).")
                self.warnings.append(msg)
                if not self.quiet:
                    warnings.warn(msg, SchedulerStepWarning, stacklevel=2)

    def _failed(self, row: StepRow) -> bool:
        """A non-finite loss; a non-finite module output that mattered (the loss or a gradient went
        non-finite with it, or they are unknown: a value the model computes and discards -- an attention
        mask of -inf -- is no failure); a non-finite gradient without a scaler (applied to the weights)."""
        grad_bad = any(_bad(v) for v in row.grad)
        known = row.loss is not None and any(v is not None for v in row.grad)
        fwd_bad = any(_bad(v) for v in row.fwd) and (not known or grad_bad or row.skipped)
        return fwd_bad or _bad(row.loss) or (grad_bad and not self.scaler)

    # ------------------------------------------------------------------ reading
    def summary(self) -> dict:
        sc = self.scales
        return {"steps": self.steps, "skipped": len(self.skipped), "skipped_steps": list(self.skipped),
                "scale_min": min(sc) if sc else None, "scale_max": max(sc) if sc else None,
                "scale_final": sc[-1] if sc else None, "initial_scale": self.initial_scale,
                "health": self.health.report()["status"] if sc else None,
                "scheduler_advanced_on_skipped": list(self.sched_advanced_on_skip),
                "first_nonfinite": self.first,
                "warnings": list(self.warnings) + [m for m in self.health.messages if m not in self.warnings]}

    def summary_line(self, first: dict | None | bool = False) -> str:
        """``first``: the run's first inf/NaN where it is not this record's own (a multi-process run)."""
        s = self.summary()
        scale = (f"; loss scale min {_fmt(s['scale_min'])}, max {_fmt(s['scale_max'])}, final {_fmt(s['scale_final'])}"
                 if s["scale_final"] is not None else "; no loss scaler")
        f = self.first if first is False else first
        on = f" on rank {f['rank']}" if f and f.get("rank") is not None else ""
        what = "the loss" if f and f.get("phase") == "loss" else f"{f['name']} ({f['phase']})" if f else ""
        first = f"; first inf/NaN: {what} at step {f['step']}{on}" if f else ""
        return (f"{self.source}: {s['steps']} steps in {self.mode}, {s['skipped']} skipped"
                f"{' ' + str(s['skipped_steps']) if s['skipped'] else ''}{scale}{first}; "
                f"{len(s['warnings'])} warning(s)")

    def to_dict(self) -> dict:
        """The document (:meth:`document`): what ``repr``, the notebook display and ``to_pandas`` read."""
        return self.document()

    def audit_report(self):
        """The audit document this record writes, as the audit's report (how a notebook shows it)."""
        from ..audit.report import AuditReport

        return AuditReport.from_dict(self.to_dict())

    def ledger(self) -> dict:
        return {"steps": self.steps, "skipped_steps": list(self.skipped), "scales": list(self.scales),
                "initial_scale": self.initial_scale}

    def state(self) -> dict:
        """What a checkpoint keeps so that a resumed run's ledger continues (plain JSON values)."""
        return {"kind": "ampkit-callback-state", "version": 1, **self.ledger(), "first_nonfinite": self.first,
                "scheduler_advanced_on_skipped": list(self.sched_advanced_on_skip)}

    def load_state(self, state: dict) -> None:
        """Continue the ledger of a checkpoint's :meth:`state` (a resumed run)."""
        self.steps = int(state.get("steps") or 0)
        self.skipped = [int(s) for s in state.get("skipped_steps") or []]
        self.scales = [float(s) for s in state.get("scales") or []]
        self.initial_scale = state.get("initial_scale")
        self.first = state.get("first_nonfinite") or None
        self.sched_advanced_on_skip = [int(s) for s in state.get("scheduler_advanced_on_skipped") or []]

    def _layers(self, row: StepRow | None) -> list[dict]:
        fmt = FORMATS.get(self.mode, FORMATS["fp32"])
        grads = dict(zip(self.grad_modules, row.grad)) if row else {}
        out = []
        for i, (name, typ) in enumerate(self.fwd_modules):
            amax = row.fwd[i] if row and i < len(row.fwd) else None
            g = grads.get(name)
            out.append({"name": name, "type": typ, "fwd_amax": amax,
                        "fwd_headroom_log2": fmt.headroom_log2(amax) if amax is not None else math.inf,
                        "fwd_underflow_frac": None, "fwd_nonfinite": int(_bad(amax)), "grad_amax": None,
                        "grad_norm": g, "grad_underflow_frac": None, "grad_nonfinite": int(_bad(g)),
                        "calls": int(amax is not None), "leaf": True})
        return out

    def document(self) -> dict:
        rows = self.failure_rows if self.first else list(self.ring)
        row = rows[-1] if rows else None
        scale = row.scale_used if row is not None and row.scale_used is not None else 1.0
        ring = {"steps": [r.step for r in rows], "loss": [_num(r.loss) for r in rows],
                "scale": [r.scale_used for r in rows], "skipped": [r.skipped for r in rows],
                "fwd_amax": {n: [_num(r.fwd[i]) if i < len(r.fwd) else None for r in rows]
                             for i, (n, _t) in enumerate(self.fwd_modules)},
                "grad_norm": {n: [_num(r.grad[j]) if j < len(r.grad) else None for r in rows]
                              for j, n in enumerate(self.grad_modules)}}
        note = self.summary_line() + (f" (declared: {self.declared})" if self.declared and self.declared != self.mode else "")
        extra = {"not_watched": list(self.not_watched)} if self.not_watched else {}
        extra.update(self.extra)
        if self.world > 1:
            extra.update(rank=self.rank, world_size=self.world)
        framework = self.framework or ("torch" if "keras" not in self.trainer.lower() else "tensorflow")
        return envelope("audit", self.environment, framework=framework, **extra,
                        workload=self.workload, device=self.device, mode=self.mode, loss_scale=float(scale),
                        steps=self.steps, layers=self._layers(row), first_nonfinite=self.first,
                        findings=list(self.findings), note=note, source=self.source, trainer=self.trainer,
                        ring_buffer=ring, ledger=self.ledger(), summary=self.summary(),
                        initial_loss_scale=self.initial_scale or float(scale), skipped_steps=len(self.skipped))

    def write(self, path: str) -> str | None:
        """Write the document to ``path`` (``~`` expanded); a path that cannot be written is one
        logged line and None, never an error that ends (or follows) the user's training run."""
        path = os.path.expanduser(path)
        tmp = f"{path}.tmp{os.getpid()}"
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(self.document(), fh, indent=1, default=str)
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("%s: could not write %s (%s: %s); the run goes on without it", self.source, path,
                        type(exc).__name__, exc.strerror or exc)
            with contextlib.suppress(OSError):
                os.remove(tmp)
            return None
        return path
