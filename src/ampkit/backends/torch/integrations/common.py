"""What the HuggingFace and Lightning callbacks share: their arguments, the record and watch they
make, the parameter-dtype check, and whether a scaler's gradients are still scaled."""

from __future__ import annotations

import json
import logging
import os

import torch

from ....errors import UsageError
from ....integrations.record import DEFAULT_K, TrainRecord
from ....integrations.trackers import TrackerWindow
from ..engine.scaler_state import scale_tensor, unscaled
from .watch import TorchWatch

log = logging.getLogger("ampkit.integrations")
#: the file a checkpoint folder gets from the callback (the ledger, so that a resumed run continues it)
STATE_FILE = "ampkit_callback_state.json"


class CallbackCore:
    """The state of one callback: arguments checked at construction, record and watch per fit."""

    def __init__(self, json_path=None, *, k: int = DEFAULT_K, read_every: int | None = None,
                 min_scale_warning: float = 1.0, consecutive_skip_warning: int = 10) -> None:
        if json_path is not None and not isinstance(json_path, (str, os.PathLike)):
            raise UsageError(f"AmpkitCallback: json_path must be a file path (str), received {json_path!r}")
        if json_path is not None:
            json_path = os.path.expanduser(os.fspath(json_path))
        if json_path is not None and os.path.isdir(json_path):
            raise UsageError(f"AmpkitCallback: json_path {os.fspath(json_path)!r} is a directory; name a .json file in it")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise UsageError(f"AmpkitCallback: k (steps kept before a failure) must be an int >= 1, received {k!r}")
        if read_every is not None and (isinstance(read_every, bool) or not isinstance(read_every, int) or read_every < 1):
            raise UsageError(f"AmpkitCallback: read_every must be an int >= 1 or None, received {read_every!r}")
        try:  # the alarm's own checks, made now (one line) rather than when training starts
            from ....health import LossScaleHealth
            LossScaleHealth(min_scale_warning=min_scale_warning, consecutive_skip_warning=consecutive_skip_warning)
        except ValueError as exc:
            raise UsageError(f"AmpkitCallback: {exc}")
        self.json_path = None if json_path is None else os.fspath(json_path)
        self.k, self.read_every = k, read_every
        self.min_scale_warning, self.consecutive_skip_warning = min_scale_warning, consecutive_skip_warning
        self.record: TrainRecord | None = None
        self.watch: TorchWatch | None = None
        self.checked = False
        self.window = TrackerWindow()
        self.merged: dict | None = None

    def start(self, model: torch.nn.Module, *, source: str, trainer: str, fallback_dir: str | None,
              rank=None, world=None, global_step: int = 0, resume_state: dict | None = None,
              reads_each_step: bool = False, replay: bool = True) -> None:
        """A new run (a callback reused for a second fit starts clean); ``global_step``: the trainer's
        step count before this run's first step (a resumed run), ``resume_state``: the ledger its
        checkpoint kept; ``reads_each_step``: the trainer reads the device every step anyway (then, as
        on a CPU, a failing step is replayed at once: :class:`.watch.TorchWatch`); ``replay`` False: the
        watch sees a step only after the optimizer applied it (Fabric without a loss scaler), so a
        replay would run on other weights than the failing forward's."""
        from ..environment import torch_environment
        from .dist import rank_world

        if self.watch is not None:   # a run that ended without its end event: its hooks go now
            self.watch.detach()
        self.merged = None
        self.record = TrainRecord(source=source, trainer=trainer, k=self.k, json_path=self.json_path,
                                  fallback_dir=fallback_dir, min_scale_warning=self.min_scale_warning,
                                  consecutive_skip_warning=self.consecutive_skip_warning,
                                  workload=type(model).__name__)
        self.record.rank, self.record.world = rank_world(rank, world)
        if resume_state:
            self.record.load_state(resume_state)
        self.window.reset(self.record)
        self.watch = TorchWatch(self.record, k=self.k, read_every=self.read_every)
        self.watch.attach(model)
        if replay and (reads_each_step or self.watch.device.type == "cpu"):
            self.watch.hold_steps([model, *model.children()])
        # step numbers are the trainer's global steps (1-based), also after a resume
        self.watch.steps, self.watch._cur = int(global_step), int(global_step) + 1
        self.record.device = str(self.watch.device)
        self.record.environment = torch_environment(self.watch.device)
        self.checked = False

    def check_precision(self, scaler, *, declared: str, setting: str, why: dict[str, str], optimizer=None) -> None:
        """Once, at the first optimizer step: what the first forward ran against what was declared;
        ``why``: per mode that runs instead, the reason to append."""
        if self.checked or self.watch is None or self.watch.autocast is None:
            return
        self.checked = True
        mode, scaling = self.watch.observed_mode(scaler)
        self.record.precision(declared=declared, setting=setting, mode=mode, scaler=scaling, why=why.get(mode, ""))
        if mode != "fp32":
            self.record.contract(param_findings(self.watch.model, mode, optimizer))

    def finish(self, schedulers=(), *, aborted: BaseException | None = None) -> str:
        """The end of a run, or its abort (an exception, Ctrl-C): the hooks go first, whatever
        happens next; what was recorded is written. In a multi-process run that ended normally, rank
        0 gathers every rank's record and writes the run's one document (:mod:`.dist`)."""
        from .dist import gather_run_document
        from .watch import scheduler_counters

        watch, record = self.watch, self.record
        self.watch = None
        try:
            watch.flush()
        finally:
            watch.detach()
        record.finish(scheduler_counters(schedulers))
        if aborted is not None:
            line = (f"{record.source}: training ended by {type(aborted).__name__} after {record.steps} recorded "
                    f"step(s); hooks removed")
            record.warnings.append(line)
            record.say(line)
        if record.world > 1:
            merged = None if aborted is not None else gather_run_document(record)
            if merged is not None:
                role = merged["ranks"][record.rank]["role"]
                record.extra = {"role": role, "cross_rank": merged["cross_rank"]}
                if record.rank == 0:
                    self.merged = merged
                    if self.json_path:
                        _write_json(record, self.json_path, merged)
            if record.failure_path or (self.json_path and merged is None):   # each rank's own record
                record.write(record.failure_path or record.failure_target())
        else:
            if self.json_path:
                record.write(self.json_path)
            if record.failure_path and record.failure_path != self.json_path:
                record.write(record.failure_path)   # one ledger: the failure file ends as the run ended
        return self.summary_line()

    def summary(self) -> dict | None:
        if self.record is None:
            return None
        return dict(self.merged["summary"]) if self.merged else self.record.summary()

    def summary_line(self) -> str:
        if self.merged:   # the run's first inf/NaN, then its story across the ranks
            return (f"{self.record.summary_line(self.merged.get('first_nonfinite'))} "
                    f"[{self.record.world} ranks; {self.merged.get('cross_rank')}]")
        return self.record.summary_line()

    def tracker_metrics(self) -> dict:
        """The ``amp/`` values for this logging event (the watch reads what is pending first)."""
        if self.watch is not None:
            self.watch.flush()
        return self.window.metrics(self.record)

    def save_state(self, folder: str) -> None:
        """Into a checkpoint folder: the ledger so far (rank 0 only; JSON)."""
        if self.record is None or self.record.quiet or not os.path.isdir(folder):
            return
        if self.watch is not None:
            self.watch.flush()
        _write_json(self.record, os.path.join(folder, STATE_FILE), self.record.state())


def load_state(folder) -> dict | None:
    """The ledger a checkpoint folder kept (None: none, or unreadable: a fresh ledger then)."""
    if not folder:
        return None
    try:
        with open(os.path.join(os.fspath(folder), STATE_FILE), encoding="utf-8") as fh:
            state = json.load(fh)
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and state.get("kind") == "ampkit-callback-state" else None


def _write_json(record: TrainRecord, path: str, doc: dict) -> None:
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1, default=str)
    except OSError as exc:
        log.warning("%s: could not write %s (%s)", record.source, path, exc)


class CoreViews:
    """What both callbacks share: their :class:`CallbackCore` (``self.core``), built from the arguments
    both take, and what they show of it after training. A callback's own state: :meth:`_own_state`."""

    core: CallbackCore

    def __init__(self, json_path=None, *, k: int = DEFAULT_K, read_every: int | None = None,
                 min_scale_warning: float = 1.0, consecutive_skip_warning: int = 10) -> None:
        self.core = CallbackCore(json_path, k=k, read_every=read_every, min_scale_warning=min_scale_warning,
                                 consecutive_skip_warning=consecutive_skip_warning)
        self.summary: dict | None = None
        self._own_state()

    def _own_state(self) -> None:
        """Set the callback's own attributes (at construction)."""

    @property
    def record(self) -> TrainRecord | None:
        return self.core.record

    @property
    def ledger(self) -> dict | None:
        return self.core.record.ledger() if self.core.record else None

    def _say_end(self, line: str) -> None:
        """The run's summary line: once, from rank 0 (a warning when anything was found)."""
        rec = self.core.record
        if rec.quiet:
            log.debug(line)
        else:
            log.warning(line) if rec.warnings else log.info(line)


def param_findings(model: torch.nn.Module, mode: str, optimizer=None) -> list[dict]:
    """Mixed precision keeps float32 master weights, gradients and optimizer state: the engine's
    contract check (``verify_torch``, issue #22) on the model as the trainer holds it (autocast is
    seen by the watch itself). Where that check is absent, a small one: each module whose own
    trainable parameters are not float32 is one finding (``{"where", "expected", "actual", "advice"}``)."""
    try:
        from ..engine.contract import verify_torch
    except ImportError:
        verify_torch = None
    if verify_torch is not None:
        inner = getattr(optimizer, "optimizer", optimizer)
        try:
            return verify_torch(model, inner if isinstance(inner, torch.optim.Optimizer) else None,
                                compute_dtype=torch.float16 if mode == "fp16" else torch.bfloat16)
        except (TypeError, ValueError):   # a signature of another shape: the small check below
            pass
    out = []
    for name, m in model.named_modules():
        bad = sorted({str(p.dtype).replace("torch.", "") for p in m.parameters(recurse=False)
                      if p.requires_grad and p.dtype != torch.float32})
        if bad:
            out.append({"where": name or "(model)", "expected": "float32 parameters (master weights)",
                        "actual": ", ".join(bad),
                        "advice": f"{mode} mixed precision keeps parameters in float32 and computes in {mode} under "
                                  f"autocast; a module cast with .half()/.to(dtype) loses the master weights"})
    return out


def grad_scale_pending(scaler, optimizer) -> torch.Tensor | None:
    """The scale still in the gradients at this point (None when the scaler unscaled them already)."""
    scale = scale_tensor(scaler)
    if scale is None:
        return None
    return None if unscaled(scaler, getattr(optimizer, "optimizer", optimizer)) else scale
