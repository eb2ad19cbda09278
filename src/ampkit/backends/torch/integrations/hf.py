"""``AmpkitCallback`` for the HuggingFace ``Trainer`` (public name: ``ampkit.integrations.transformers``)."""

from __future__ import annotations

import functools
import logging
import os
import time

import accelerate
import torch
import transformers
from transformers import Trainer, TrainerCallback

from .common import CoreViews, grad_scale_pending, load_state
from .engines import HostScale, scaler_of, unreadable_scale_line

__all__ = ["AmpkitCallback"]

log = logging.getLogger("ampkit.integrations.transformers")


class AmpkitCallback(CoreViews, TrainerCallback):
    """Watches a HuggingFace ``Trainer`` run: skip ledger, loss-scale health, LR scheduler on skipped
    steps, a pre-failure ring buffer written as an ``audit`` document on the first inf/NaN, and the
    declared precision against what runs.

    Args:
        json_path: where the document goes: on the first inf/NaN (with the last ``k`` steps) and at
            the end of training (with the summary). None: a failure goes to
            ``<output_dir>/ampkit_first_failure.json``, the summary only to the log.
        k: steps the ring buffer keeps (default 8).
        read_every: read the device every N steps (default: every 4 steps on a CPU, where reading costs
            nothing; on a GPU the Trainer's ``logging_steps``, at most 32).
        min_scale_warning, consecutive_skip_warning: the thresholds of the loss-scale alarm
            (:class:`ampkit.LossScaleWarning`), as in ``ampkit.MixedPrecision``.

    ``trainer.add_callback(AmpkitCallback(json_path="run.json"))`` or ``Trainer(callbacks=[...])``.
    After training: ``.summary`` (a dict) and ``.ledger`` (steps, skipped steps, scales).
    """

    def _own_state(self) -> None:
        self._resume_from = None
        self._engine_checked = False

    # ------------------------------------------------------------------ the Trainer's events
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        trainer = f"transformers {transformers.__version__} (accelerate {accelerate.__version__})"
        resume, self._resume_from = self._resume_from, None
        self.core.start(model, source="AmpkitCallback (transformers Trainer)", trainer=trainer,
                        fallback_dir=args.output_dir, rank=args.process_index, world=args.world_size,
                        global_step=state.global_step, resume_state=load_state(resume) if resume else None,
                        reads_each_step=bool(getattr(args, "logging_nan_inf_filter", False)))
        if self.core.read_every is None and self.core.watch.device.type != "cpu":
            self.core.watch.read_every = max(1, min(32, int(args.logging_steps or 32)))
        self.summary, self._engine_checked = None, False
        self._step_times = [time.perf_counter()]  # the run record's step times (ampkit parity --runs)
        host = scaler_of(kwargs.get("optimizer"))
        if isinstance(host, HostScale):   # DeepSpeed steps inside backward: the scale a step used is the last one after
            self.core.watch.prev_scale_from(host)

    def on_pre_optimizer_step(self, args, state, control, optimizer=None, lr_scheduler=None, **kwargs):
        if self.core.watch is None:
            return
        scaler = scaler_of(optimizer)
        if not self._engine_checked:
            self._engine_checked = True
            self.core.record.scheduler_cause = _scheduler_cause(optimizer)
            line = unreadable_scale_line(optimizer, scaler, declared=_declared(args), source=self.core.record.source)
            if line:
                self.core.record.not_watched.append("loss scale")
                self.core.record.warn_line(line)
        self.core.watch.grads(None if isinstance(scaler, HostScale) else scaler,
                              [lr_scheduler] if lr_scheduler is not None else (),
                              grad_scale=grad_scale_pending(scaler, optimizer))
        self.core.check_precision(scaler, declared=_declared(args), setting=_setting(args), why={
            "fp32": f" (accelerate {accelerate.__version__} turns fp16 autocast and its GradScaler on only on a GPU; "
                    f"on a CPU it leaves both off without a word: TrainingArguments(bf16=True) runs mixed "
                    f"precision here)",
            "bf16": "",
        }, optimizer=optimizer)

    def on_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
        if self.core.watch is not None:
            self.core.watch.end_step(scaler_of(optimizer))
        if hasattr(self, "_step_times"):
            self._step_times.append(time.perf_counter())

    def on_log(self, args, state, control, logs=None, **kwargs):
        # the Trainer has just read its loss from the device: the pending rows come at no extra cost;
        # its own entry of log_history is a copy made before this event, so it stays as it was
        if self.core.watch is not None and isinstance(logs, dict):
            logs.update(self.core.tracker_metrics())

    def on_save(self, args, state, control, **kwargs):
        """The ledger goes into the checkpoint folder, so that a resumed run continues it."""
        if self.core.watch is not None:
            self.core.save_state(os.path.join(args.output_dir, f"checkpoint-{state.global_step}"))

    def on_train_end(self, args, state, control, lr_scheduler=None, **kwargs):
        if self.core.watch is None:
            return
        try:  # the run record is an addition: it never ends (or follows) the user's training
            self.core.record.extra["run"] = run_record(self.core.record, args, state, getattr(self, "_step_times", []),
                                                       getattr(self.core.watch, "model", None))
        except Exception as exc:  # noqa: BLE001
            log.warning("%s: no run record (%s: %s)", self.core.record.source, type(exc).__name__, exc)
        self._say_end(self.core.finish([lr_scheduler] if lr_scheduler is not None else ()))
        self.summary = self.core.summary()
        # kept in the history, before the Trainer's own last entry: log_history[-1] stays the Trainer's
        entry = {"ampkit": self.summary, "step": state.global_step}
        state.log_history.insert(max(0, len(state.log_history) - 1), entry)

    def _abort(self, exc: BaseException) -> None:
        """The run ended by an exception (see ``Trainer.train``'s wrapper): hooks off, record written."""
        if self.core.watch is None:
            return
        try:
            self._say_end(self.core.finish(aborted=exc))
            self.summary = self.core.summary()
        except Exception as err:   # never hide the user's exception behind one of ours
            log.warning("AmpkitCallback: could not write the record after %s (%s)", type(exc).__name__, err)


def _scheduler_cause(optimizer) -> str:
    inner = getattr(optimizer, "optimizer", optimizer)
    tv, av = transformers.__version__, accelerate.__version__
    if getattr(inner, "_step_supports_amp_scaling", False):
        fused = "fused=True" if (getattr(inner, "defaults", {}) or {}).get("fused") else "its own scaling"
        return (f"the optimizer {type(inner).__module__}.{type(inner).__name__}({fused}, torch {torch.__version__}) "
                f"takes GradScaler's inf check into its own fused step, so GradScaler calls its step() on a skipped "
                f"step too: accelerate {av}'s step_was_skipped stays False and transformers {tv} steps the "
                f"scheduler (its guard reads that flag); TrainingArguments(optim='adamw_torch') (unfused) keeps "
                f"the guard working and your schedule as configured")
    return (f"transformers {tv} steps the scheduler whenever accelerate {av}'s step_was_skipped is False, and "
            f"{type(inner).__name__} did not report this skip")


def _wrap_train(cls) -> None:
    """``Trainer.train``, wrapped once: see docs/internals.md."""
    orig = cls.train
    if getattr(orig, "_ampkit", False):
        return

    @functools.wraps(orig)
    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        handler = getattr(self, "callback_handler", None)
        ours = [c for c in getattr(handler, "callbacks", ()) if isinstance(c, AmpkitCallback)]
        if not ours:
            return orig(self, resume_from_checkpoint, *args, **kwargs)
        # first in line, so that on_log's amp/ values reach the reporting integrations after it
        handler.callbacks = ours + [c for c in handler.callbacks if c not in ours]
        resume = resume_from_checkpoint
        if resume is True:   # the Trainer finds it (and says so when there is none): only a look here
            from transformers.trainer_utils import get_last_checkpoint
            try:
                resume = get_last_checkpoint(self.args.output_dir)
            except OSError:
                resume = None
        for c in ours:
            c._resume_from = resume if isinstance(resume, (str, os.PathLike)) else None
        try:
            return orig(self, resume_from_checkpoint, *args, **kwargs)
        except BaseException as exc:
            for c in ours:
                c._abort(exc)
            raise

    train._ampkit = True
    cls.train = train


_wrap_train(Trainer)


def _declared(args) -> str:
    return "fp16" if getattr(args, "fp16", False) else "bf16" if getattr(args, "bf16", False) else "fp32"


def _setting(args) -> str:
    d = _declared(args)
    return "TrainingArguments(fp32 default)" if d == "fp32" else f"TrainingArguments({d}=True)"


#: what the Trainer logs beside its metrics (not a metric of the model)
_NOT_METRICS = ("runtime", "per_second", "epoch", "step", "flos")


def run_record(record, args, state, step_times: list[float], model=None) -> dict:
    """The run as ``ampkit parity --runs`` reads it, from the Trainer's own log: the training loss at
    each logging step (``logging_steps=1``: every step), the evaluation metrics as logged
    (``eval_accuracy``, ``eval_loss``), the step times, the mode that ran and ``args.seed``."""
    history = [e for e in state.log_history if isinstance(e, dict)]
    losses = [e for e in history if "loss" in e and "step" in e]
    evals = [{"step": e.get("step"), **{k: v for k, v in e.items() if k.startswith("eval_") and isinstance(v, (int, float))
                                        and not any(w in k for w in _NOT_METRICS)}}
             for e in history if any(k.startswith("eval_") for k in e)]
    from ....runlog import model_name

    return {"mode": record.mode, "seed": int(args.seed), "model": model_name(model) or record.workload, "data": None,
            "framework": "torch",
            "steps": int(state.global_step), "loss": [float(e["loss"]) for e in losses],
            "loss_steps": [int(e["step"]) for e in losses],
            "step_s": [b - a for a, b in zip(step_times, step_times[1:])], "eval": evals,
            "skipped_steps": len(record.skipped), "seconds": (step_times[-1] - step_times[0]) if step_times else 0.0}
