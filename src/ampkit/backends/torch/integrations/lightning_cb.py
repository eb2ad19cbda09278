"""``AmpkitCallback`` for Lightning (public name: ``ampkit.integrations.lightning``): the ``Trainer``'s
callback, and the same object for Fabric (``Fabric(callbacks=[cb])``)."""

from __future__ import annotations

import functools
import logging

import lightning
import torch
from lightning.pytorch.callbacks import Callback

from ..engine.scaler_state import enabled, scale_tensor
from .common import CoreViews, grad_scale_pending
from .spawn import carry_through_spawn

__all__ = ["AmpkitCallback"]

log = logging.getLogger("ampkit.integrations.lightning")
_MODE_OF_FLAG = {"16-mixed": "fp16", "bf16-mixed": "bf16", "16-true": "fp16", "bf16-true": "bf16",
                 "32-true": "fp32", "32": "fp32", "16": "fp16", "bf16": "bf16"}


def _note_declared(cls, attr: str) -> None:
    """Wrap ``cls._check_and_init_precision`` to keep the precision flag as the user gave it."""
    orig = getattr(cls, "_check_and_init_precision", None)
    if orig is None or getattr(orig, "_ampkit", False):
        return

    @functools.wraps(orig)
    def wrapped(self, *a, **kw):
        self._ampkit_declared = str(getattr(self, attr, "") or "")
        return orig(self, *a, **kw)

    wrapped._ampkit = True
    cls._check_and_init_precision = wrapped


try:
    from lightning.fabric.connector import _Connector
    from lightning.pytorch.trainer.connectors.accelerator_connector import _AcceleratorConnector
    _note_declared(_AcceleratorConnector, "_precision_flag")
    _note_declared(_Connector, "_precision_input")
except ImportError:  # another Lightning layout: the check falls back to the precision that runs
    pass


class AmpkitCallback(CoreViews, Callback):
    """Watches a Lightning run: skip ledger, loss-scale health, LR scheduler on skipped steps, a
    pre-failure ring buffer written as an ``audit`` document on the first inf/NaN, and the declared
    precision against what runs. Arguments as in ``ampkit.integrations.transformers.AmpkitCallback``
    (``json_path=``, ``k=8``, ``read_every``, ``min_scale_warning``, ``consecutive_skip_warning``)."""

    def _own_state(self) -> None:
        self._stepped = False
        self._scaler = None
        self._schedulers: list = []
        self._declared = ("32-true", "")
        self._resume_state: dict | None = None
        self._trace = None  # the run record (ampkit.runlog.RunTrace): set at on_fit_start
        self._engine = None
        self._engine_steps = 0

    # ------------------------------------------------------------------ Trainer
    def on_fit_start(self, trainer, pl_module):
        resume, self._resume_state = self._resume_state, None
        self._start(pl_module, "Trainer", trainer.default_root_dir, trainer.precision_plugin,
                    getattr(trainer, "_accelerator_connector", None), rank=trainer.global_rank,
                    world=trainer.world_size, resume=resume)
        if self.core.read_every is None and self.core.watch.device.type != "cpu":
            self.core.watch.read_every = max(1, min(32, int(trainer.log_every_n_steps or 32)))
        from ....runlog import RunTrace

        self._trace = RunTrace()

    def on_train_start(self, trainer, pl_module):
        # a resumed run's loops are restored after on_fit_start: step numbers are the global steps
        if self.core.watch is not None:
            self.core.watch.steps, self.core.watch._cur = trainer.global_step, trainer.global_step + 1

    def state_dict(self) -> dict:
        """Saved with Lightning's checkpoints: the ledger so far, so that a resumed run continues it."""
        if self.core.watch is not None:
            self.core.watch.flush()
        return self.core.record.state() if self.core.record is not None else {}

    def load_state_dict(self, state_dict: dict) -> None:
        self._resume_state = dict(state_dict) if state_dict else None

    def _from_worker(self, data: dict) -> None:
        """``ddp_spawn``: rank 0's record, carried back to this (the launching) process (:mod:`.spawn`)."""
        from ....integrations.record import TrainRecord

        record = TrainRecord(source="AmpkitCallback (Lightning Trainer)", trainer=f"lightning {lightning.__version__}")
        if data.get("state"):
            record.load_state(data["state"])
        self.core.record, self.core.merged, self.summary = record, data.get("merged"), data.get("summary")

    def on_before_backward(self, trainer, pl_module, loss):
        if self.core.watch is not None:   # the plugin hands the loss scaled: the ring keeps the loss itself
            scale = scale_tensor(self._scaler)
            self.core.watch.set_loss(loss if scale is None else loss.detach() / scale.to(loss.device).reshape(()))

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        if self.core.watch is None:
            return
        scheds = _step_schedulers(trainer)
        self.core.watch.grads(self._scaler, scheds, grad_scale=grad_scale_pending(self._scaler, optimizer))
        self._check(optimizer)
        self._stepped = True

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.core.watch is None:
            return
        engine_stepped = self._engine is not None and self._engine.stats["steps"] > self._engine_steps
        if engine_stepped:
            self._engine_steps = self._engine.stats["steps"]
            if not self._stepped:   # the engine skipped it: no optimizer hook ran
                self.core.watch.grads(None, _step_schedulers(trainer))
                self._check(None)
        if self._stepped or engine_stepped:
            self._stepped = False
            self.core.watch.end_step(self._scaler)
            if self._trace is not None:
                self._trace.step_end()
            if _logging_step(trainer):   # the trainer's logging cadence
                if self._trace is not None:  # the loss the trainer logs now (one host read at its cadence)
                    loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
                    if loss is not None and hasattr(loss, "item"):
                        self._trace.loss_at(trainer.global_step, loss.detach())
                metrics = self.core.tracker_metrics()
                if metrics:
                    pl_module.log_dict(metrics, on_step=True, on_epoch=False, batch_size=1)

    def on_validation_end(self, trainer, pl_module):
        if self._trace is not None and not trainer.sanity_checking:  # the metrics as the module logged them
            self._trace.evaluate(trainer.global_step, {k: v for k, v in trainer.callback_metrics.items()
                                                       if not k.startswith("amp/")})

    def on_train_end(self, trainer=None, pl_module=None):
        """The Trainer calls it; Fabric users call ``fabric.call("on_train_end")`` at the end of their loop."""
        if trainer is not None and self._trace is not None and self.core.record is not None:
            import os

            from ....runlog import model_name

            try:  # the run record is an addition: it never ends (or follows) the user's training
                seed = int(os.environ.get("PL_GLOBAL_SEED", torch.initial_seed() % 2**31))
                self.core.record.extra["run"] = self._trace.run(
                    mode=self.core.record.mode, seed=seed, model=model_name(pl_module), steps=trainer.global_step,
                    skipped=len(self.core.record.skipped), framework="torch")
            except Exception as exc:  # noqa: BLE001
                log.warning("%s: no run record (%s: %s)", self.core.record.source, type(exc).__name__, exc)
        self._end(_step_schedulers(trainer) if trainer is not None else [])
        if trainer is not None and trainer.logger is not None and self.summary:
            s = self.summary
            trainer.logger.log_metrics({k: float(s[k]) for k in ("steps", "skipped", "scale_min", "scale_max",
                                                                   "scale_final") if s[k] is not None},
                                       step=trainer.global_step)

    def on_exception(self, trainer, pl_module, exception):
        """An exception, or Ctrl-C (Lightning calls this, then exits): hooks off, record written."""
        if self.core.watch is not None:
            self._end(_step_schedulers(trainer), aborted=exception)

    # ------------------------------------------------------------------ Fabric
    def on_after_setup(self, fabric, module):
        """Fabric calls this from ``fabric.setup(model, optimizer)``."""
        self._start(getattr(module, "_original_module", module), "Fabric", None, fabric.strategy.precision,
                    getattr(fabric, "_connector", None))

    def watch_schedulers(self, *schedulers) -> AmpkitCallback:
        """Fabric: the LR schedulers that your loop steps (the Trainer's are found by themselves)."""
        self._schedulers = list(schedulers)
        return self

    def on_after_optimizer_step(self, strategy=None, optimizer=None):
        """Fabric calls this after each ``optimizer.step()`` (the scaler has stepped and updated)."""
        if self.core.watch is None:
            return
        self.core.watch.grads(None, self._schedulers)
        self._check(optimizer)
        self.core.watch.end_step(self._scaler)

    # ------------------------------------------------------------------ shared
    def _start(self, module, kind: str, out_dir, plugin, connector, rank=None, world=None, resume=None) -> None:
        self._scaler = getattr(plugin, "scaler", None)
        runs = str(getattr(plugin, "precision", "32-true"))
        declared = getattr(connector, "_ampkit_declared", "") or runs
        given = getattr(connector, "_precision_plugin_flag", None) or getattr(connector, "_precision_instance", None)
        if given is plugin:   # a precision plugin given: it is the declaration
            declared = runs
        self._declared = (declared, runs)
        self._engine = _engine_of(module)
        if self._engine is not None:   # ampkit's engine in the module: its scaler, its mode declared
            self._engine_steps = self._engine.stats["steps"]
            if self._scaler is None:
                self._scaler = self._engine.scaler
            self._declared = (self._engine.mode, f"ampkit.MixedPrecision({self._engine.mode!r})")
        self.core.start(module, source=f"AmpkitCallback (Lightning {kind})", trainer=f"lightning {lightning.__version__}",
                        fallback_dir=out_dir, rank=rank, world=world, resume_state=resume,
                        reads_each_step=enabled(self._scaler),   # GradScaler.step reads found_inf each step
                        # Fabric's hook comes after optimizer.step(): a step no scaler skipped was applied already
                        replay=kind == "Trainer" or enabled(self._scaler))
        self.core.record.scheduler_cause = (
            f"lightning {lightning.__version__} steps a scheduler with interval='step' after every optimizer step, "
            f"skipped or not (epoch-interval schedulers are not concerned); to keep your schedule, override "
            f"LightningModule.lr_scheduler_step to call scheduler.step() only when the precision plugin's "
            f"scaler.get_scale() did not drop" if kind == "Trainer" else
            "your loop steps it after every optimizer.step(), and GradScaler skips optimizer steps silently; step it "
            "only when fabric.strategy.precision.scaler.get_scale() did not drop")
        self.core.watch.prev_scale_from(self._scaler)
        self.summary, self._stepped = None, False

    def _check(self, optimizer=None) -> None:
        declared, runs = self._declared
        self.core.check_precision(self._scaler, declared=_MODE_OF_FLAG.get(declared, declared),
                                  setting=runs if self._engine is not None else f"precision={declared!r}", why={
            "bf16": (f" (lightning {lightning.__version__} replaces precision={declared!r} by {runs!r} on a CPU)"
                     if declared != runs else ""),
            "fp32": "",
        }, optimizer=optimizer)

    def _end(self, schedulers, aborted: BaseException | None = None) -> None:
        if self.core.watch is None:
            return
        try:
            self._say_end(self.core.finish(list(schedulers) + [s for s in self._schedulers if s not in schedulers],
                                           aborted=aborted))
            self.summary = self.core.summary()
        except Exception as err:
            if aborted is None:
                raise
            log.warning("AmpkitCallback: could not write the record after %s (%s)", type(aborted).__name__, err)


def _engine_of(module):
    """ampkit's engine (``ampkit.MixedPrecision``) held by the module as an attribute, or None."""
    from ..engine.mixed_precision import MixedPrecision

    return next((v for v in vars(module).values() if isinstance(v, MixedPrecision)), None)


def _logging_step(trainer) -> bool:
    """Whether the trainer writes its logs after this batch (its own test, else its rule)."""
    conn = getattr(trainer, "_logger_connector", None)
    if conn is not None and hasattr(type(conn), "should_update_logs"):
        return bool(conn.should_update_logs)
    every = int(getattr(trainer, "log_every_n_steps", 50) or 0)
    return every > 0 and trainer.global_step % every == 0


def _step_schedulers(trainer) -> list:
    """The schedulers judged per optimizer step: ``interval="step"`` ones (an epoch-interval scheduler
    counts epochs, which a skipped step does not change)."""
    return [c.scheduler for c in trainer.lr_scheduler_configs if getattr(c, "interval", "step") == "step"]


carry_through_spawn(AmpkitCallback)
