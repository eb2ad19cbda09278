"""``AmpkitCallback`` for the HuggingFace ``Trainer`` (public name: ``ampkit.integrations.transformers``).

The Trainer steps through Accelerate: its optimizer is an ``AcceleratedOptimizer`` whose ``scaler``
is the run's one GradScaler (None without fp16 on a GPU). The callback reads that scaler's scale
tensor around each step (``on_pre_optimizer_step`` / ``on_optimizer_step``), the model's outputs
through forward hooks, and the scheduler's counter; it makes no scaler of its own and reads the
device only where :class:`~.watch.TorchWatch` says.
"""

from __future__ import annotations

import logging

import accelerate
import transformers
from transformers import TrainerCallback

from ....integrations.record import DEFAULT_K
from .common import CallbackCore, CoreViews, grad_scale_pending

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

    def __init__(self, json_path=None, *, k: int = DEFAULT_K, read_every: int | None = None,
                 min_scale_warning: float = 1.0, consecutive_skip_warning: int = 10) -> None:
        self.core = CallbackCore(json_path, k=k, read_every=read_every, min_scale_warning=min_scale_warning,
                                 consecutive_skip_warning=consecutive_skip_warning)
        self.summary: dict | None = None

    # ------------------------------------------------------------------ the Trainer's events
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        trainer = f"transformers {transformers.__version__} (accelerate {accelerate.__version__})"
        self.core.start(model, source="AmpkitCallback (transformers Trainer)", trainer=trainer,
                        fallback_dir=args.output_dir)
        if self.core.read_every is None and self.core.watch.device.type != "cpu":
            self.core.watch.read_every = max(1, min(32, int(args.logging_steps or 32)))
        self.summary = None

    def on_pre_optimizer_step(self, args, state, control, optimizer=None, lr_scheduler=None, **kwargs):
        if self.core.watch is None:
            return
        scaler = getattr(optimizer, "scaler", None)
        self.core.watch.grads(scaler, [lr_scheduler] if lr_scheduler is not None else (),
                              grad_scale=grad_scale_pending(scaler, optimizer))
        self.core.check_precision(scaler, declared=_declared(args), setting=_setting(args), why={
            "fp32": f" (accelerate {accelerate.__version__} turns fp16 autocast and its GradScaler on only on a GPU; "
                    f"on a CPU it leaves both off without a word: TrainingArguments(bf16=True) runs mixed "
                    f"precision here)",
            "bf16": "",
        }, optimizer=optimizer)

    def on_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
        if self.core.watch is not None:
            self.core.watch.end_step(getattr(optimizer, "scaler", None))

    def on_log(self, args, state, control, **kwargs):
        # the Trainer has just read its loss from the device: the pending rows come at no extra cost
        if self.core.watch is not None:
            self.core.watch.flush()

    def on_train_end(self, args, state, control, lr_scheduler=None, **kwargs):
        if self.core.watch is None:
            return
        line = self.core.finish([lr_scheduler] if lr_scheduler is not None else ())
        log.warning(line) if self.core.record.warnings else log.info(line)
        self.summary = self.core.record.summary()
        state.log_history.append({"ampkit": self.summary, "step": state.global_step})
        self.core.watch = None


def _declared(args) -> str:
    return "fp16" if getattr(args, "fp16", False) else "bf16" if getattr(args, "bf16", False) else "fp32"


def _setting(args) -> str:
    d = _declared(args)
    return "TrainingArguments(fp32 default)" if d == "fp32" else f"TrainingArguments({d}=True)"
