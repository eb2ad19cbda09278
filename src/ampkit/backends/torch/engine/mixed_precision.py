"""``ampkit.MixedPrecision``: the training engine for users' own PyTorch loops.

DDP and FSDP are handled in :mod:`.distributed`, the schedulers in :mod:`.schedulers`, the
optimizers the engine has seen in :mod:`.following`. Host-device syncs are listed in :mod:`.scaling`;
the engine adds none to a step beyond those. ``StepResult.grad_norm`` is a device tensor until read
(reading it syncs)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from ....capability import resolve_mode
from ....engine_front import PrecisionFront
from ....errors import UsageError
from ....precision import AUTO, Precision, get_precision
from ..devices import mode_support, resolve_auto, resolve_device
from ..tf32 import tf32_math
from .alarm import engine_health, health_report, model_path
from .clip_limit import ClipLimits
from .contract import verify_engine
from .copying import engine_state, load_engine_state, restore_engine
from .distributed import clip_grad_norm, no_gradient_sync, scaling_for_model
from .following import Followers
from .fp8 import FP8_REGION, fp8_engine
from .islands import PlanFront, islands_for, raise_unapplied
from .regions import region_maker
from .scaling import scaling_for
from .schedulers import schedulers_of, step_schedulers
from .step_result import _NO_LOCATOR, StepResult
from .watch import ContractWatch

__all__ = ["MixedPrecision", "StepResult"]


class MixedPrecision(PrecisionFront, PlanFront):
    """Autocast, fp32 master weights, dynamic loss scaling, clipping after unscale, accumulation.

    Args:
        mode: a precision mode or alias (``fp32``, ``tf32``, ``fp16``, ``bf16``, ``16-mixed``...)
            or ``"auto"`` to choose by device capability (``mp.reason`` says why).
        device: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or a torch.device.
        init_scale, growth_factor, backoff_factor, growth_interval: as for
            ``torch.amp.GradScaler`` (fp16 only; the scale dynamics are exactly GradScaler's).
        accumulation_steps: micro-batches per optimizer step. ``backward`` divides each
            micro-batch loss by it, and :meth:`accumulate` skips DDP's gradient all-reduce on all
            but the last micro-batch.
        model: optional; used to check that master weights are float32 and to pick
            ``ShardedGradScaler`` for FSDP models. Same as calling :meth:`prepare` later.
        fp8_recipe, fp8_skip_first_last, fp8_filter: mode ``fp8`` only (torchao, ``ampkit[fp8]``):
            the recipe (``tensorwise``, default, or ``rowwise``); whether the first and last Linear
            stay in bf16 (default True); your own ``(module, name) -> bool`` filter on top. See
            :mod:`.fp8`: ``model = mp.prepare(model)`` converts, ``mp.fp8_layers`` says what and why.
        min_scale_warning, consecutive_skip_warning: fp16: one :class:`ampkit.LossScaleWarning` the first
            time the scale falls below this or this many steps in a row are skipped (:meth:`health`).
        keep_fp32: modules kept in float32 (names, globs over names, class names), resolved at
            :meth:`prepare`: autocast off inside, inputs cast to float32, outputs left float32 (:mod:`.islands`).
            :meth:`from_plan` reads them from a plan file; :attr:`plan` is the plan in force.

    Every torch optimizer implementation works (for-loop, foreach, fused, capturable), and an
    optimizer may be replaced by a new one at any time (one per training phase); skips, the
    scale and the schedulers stay exact. ``ReduceLROnPlateau``: ``mp.step(opt, sched, metric=val_loss)``.

    Raises:
        ValueError: unknown mode (the message lists the valid ones).
        ModeUnavailableError: the device cannot run the mode (the message says why).

    Example::

        mp = ampkit.MixedPrecision("auto")
        for x, y in loader:
            with mp.autocast():
                loss = loss_fn(model(x), y)
            mp.backward(loss)
            result = mp.step(optimizer, scheduler, max_grad_norm=1.0)
            optimizer.zero_grad(set_to_none=True)
    """

    def __init__(
        self,
        mode: str = AUTO,
        device: Any = AUTO,
        *,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        accumulation_steps: int = 1,
        model: torch.nn.Module | None = None,
        fp8_recipe: str | None = None,
        fp8_skip_first_last: bool = True,
        fp8_filter: Callable[[torch.nn.Module, str], bool] | None = None,
        min_scale_warning: float = 1.0,
        consecutive_skip_warning: int = 10,
        keep_fp32=None,
    ) -> None:
        self.device = device = resolve_device(device)
        self._fp8 = fp8_engine(mode, device, fp8_recipe, fp8_skip_first_last, fp8_filter)  # None unless mode is fp8
        resolved, self.reason = ("fp8", self._fp8.reason) if self._fp8 else resolve_mode(
            mode, lambda m: mode_support(m, device), lambda: resolve_auto(device), f"on {device}",
            "fp8 is not chosen by auto; ask for MixedPrecision('fp8') by name",
        )
        if not isinstance(accumulation_steps, int) or isinstance(accumulation_steps, bool) or accumulation_steps < 1:
            raise UsageError(f"accumulation_steps must be an int >= 1, received {accumulation_steps!r}")
        self.precision: Precision = get_precision(resolved)
        self.accumulation_steps = int(accumulation_steps)
        self._health = engine_health(device, min_scale_warning, consecutive_skip_warning)
        self._clip_limits = ClipLimits()  # mp.step's max_grad_norm, checked without a sync (.clip_limit)
        self._scaling = scaling_for(self.precision.loss_scaling, device.type, init_scale=init_scale,
                                    growth_factor=growth_factor, backoff_factor=backoff_factor,
                                    growth_interval=growth_interval, health=self._health)
        self._math = tf32_math(self.precision.tf32, device.type)
        self._new_region = region_maker(FP8_REGION if self._fp8 else self.precision, device.type, self._math.region)
        self._steps = 0
        self._skipped = 0
        self._micro = 0
        #: optimizers seen by step(), by identity; an entry dies with its optimizer
        self._followers = Followers(hook=self._scaling.follows_steps)
        self.model = None
        self._locator = _NO_LOCATOR
        self._local = threading.local()  # the reused autocast region, one per thread
        self._watch, self._loss_dtype = ContractWatch(), None  # for verify() (.watch, .contract)
        self._islands = islands_for(self, keep_fp32)  # a precision plan's float32 islands (.islands), or None
        if model is not None:
            self.prepare(model)

    # ------------------------------------------------------------------ set-up
    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        """The ``torch.amp.GradScaler`` (``ShardedGradScaler`` for FSDP) in fp16 mode, else None."""
        return self._scaling.scaler

    def prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        """Check the model's master weights and choose the scaler for it (FSDP -> ShardedGradScaler).

        May come before or after :meth:`load_state_dict`, and between steps: moving to the sharded
        scaler carries the scale, the growth tracker and the statistics over.
        """
        self.check_parameters(model.parameters(), where="model")
        if self._islands is not None:  # an entry matching nothing: one line, before anything changes
            self._islands.apply(model)
        if self._fp8:  # the eligible Linear layers become torchao Float8Linear (fp8.py)
            model = self._fp8.convert(model)
        self._scaling = scaling_for_model(self._scaling, model, self._micro)
        self.model = model
        self._health.advice.model = model_path(model)
        self._watch.arm(model)
        return model

    def locate_overflows(self, model: torch.nn.Module | None = None, enabled: bool = True) -> None:
        """Opt in: after a skipped step, ``StepResult.overflow`` names the module whose output (or
        gradient) held the first inf/NaN. Off by default and free when off; on, it adds one small
        reduction per module output and reads them (a sync) only after a skipped step."""
        self._locator.remove()
        self._locator = _NO_LOCATOR
        if enabled:
            from ..numerics.locate import OverflowLocator

            target = model if model is not None else self.model
            if target is None:
                raise ValueError("locate_overflows() needs the model (or MixedPrecision(..., model=model))")
            self._locator = OverflowLocator(target)

    def check_parameters(self, params: Iterable[torch.Tensor], where: str = "optimizer") -> None:
        """Raise when mixed precision is asked for but the master weights are not float32."""
        if not (self.precision.autocast or self._fp8):
            return
        for p in params:
            if p.is_floating_point() and p.dtype in (torch.float16, torch.bfloat16):
                raise TypeError(
                    f"{self.mode} mixed precision keeps float32 master weights, but the {where} holds a "
                    f"{p.dtype} parameter of shape {tuple(p.shape)}. Do not call model.half()/.to(torch.{self._dtype_name(p.dtype)}); "
                    "leave the model in float32 and let autocast cast the compute."
                )

    @staticmethod
    def _dtype_name(dtype) -> str:
        return str(dtype).replace("torch.", "")

    # ------------------------------------------------------------------ regions
    def autocast(self):
        """The forward region for this mode (use as ``with mp.autocast():``).

        Raises AutocastDisabledError if torch switched autocast off (it only warns, e.g. CUDA
        autocast without CUDA): a mode is never allowed to fall back silently.
        """
        if self._islands is not None and not self._islands.applied:
            raise_unapplied()
        local = self._local
        region = getattr(local, "region", None)
        if region is None:
            region = local.region = self._new_region()
        return region

    @contextlib.contextmanager
    def accumulate(self, model: torch.nn.Module | None = None):
        """Skip the gradient communication on all but the last micro-batch of an accumulation.

        DDP and FSDP1: ``no_sync()``; FSDP2 (``fully_shard``): ``set_requires_gradient_sync(False)``,
        so gradients accumulate unsharded and are reduce-scattered once, on the last micro-batch.

        Use around the forward *and* backward of each micro-batch; the micro-batch index is the
        number of ``backward`` calls since the last ``step``.
        """
        if self.sync_gradients:
            yield
        else:
            with no_gradient_sync(model if model is not None else self.model):
                yield

    def backward(self, loss: torch.Tensor, **kwargs) -> None:
        """Backward of one micro-batch: loss / accumulation_steps, scaled in fp16 mode."""
        if self.accumulation_steps > 1:
            loss = loss / self.accumulation_steps
        self._loss_dtype = loss.dtype
        self._math.run(self._scaling.scale_loss(loss).backward, **kwargs)
        self._micro += 1

    @property
    def sync_gradients(self) -> bool:
        """True when the next backward completes an accumulation (the step should follow)."""
        return self._micro + 1 >= self.accumulation_steps

    # ------------------------------------------------------------------ step
    def step(
        self,
        optimizer: torch.optim.Optimizer | Sequence[torch.optim.Optimizer],
        scheduler: Any = None,
        max_grad_norm: float | None = None,
        *,
        zero_grad: bool = False,
        metric: Any = None,
    ) -> StepResult:
        """Unscale, clip, step every optimizer, update the scale once, step the scheduler(s).

        Args:
            optimizer: one optimizer or a list (one scaler, one update for all). Any torch
                implementation: for-loop, foreach, fused, capturable.
            scheduler: an LR scheduler or a list. Stepped only when the optimizer step was
                taken: never on a step skipped for inf/NaN gradients.
            max_grad_norm: clip the *unscaled* gradients to this total norm (None: no clipping).
            zero_grad: also call ``zero_grad(set_to_none=True)`` on the optimizers afterwards.
            metric: the value a ``ReduceLROnPlateau`` scheduler among ``scheduler`` is stepped
                with (``sched.step(metric)``), e.g. the validation loss; other schedulers ignore it.
                A tensor is read by the scheduler (a sync). Required when such a scheduler is given.
                A plateau scheduler stepped once per epoch can equally be stepped by hand.

        Example::

            result = mp.step(opt, plateau, metric=val_loss)   # ReduceLROnPlateau
        """
        opts = optimizer if isinstance(optimizer, (list, tuple)) else (optimizer,)
        if not opts:
            raise ValueError("step() needs at least one optimizer")
        scheds = () if scheduler is None else schedulers_of(scheduler, metric)
        followed = self._followers.records(opts, self.check_parameters)  # master weights checked first
        scaling = self._scaling
        grad_norm = None
        if max_grad_norm is not None:  # NaN made every weight NaN; <= 0 stops training (.clip_limit: no sync)
            max_grad_norm = self._clip_limits.limit(max_grad_norm)
            scaling.unscale_all(opts)
            grad_norm = clip_grad_norm(self.model, opts, max_grad_norm)
        if self._watch.armed:  # the first step after prepare()/verify(): the gradients, for verify()
            self._watch.at_step(opts)
        skipped, scale = self._math.run(scaling.step, opts, followed, self._steps + 1)
        self._steps += 1
        self._skipped += skipped
        self._micro = 0
        if scheds:
            step_schedulers(scheds, metric, skipped)
        if zero_grad:
            for opt in opts:
                opt.zero_grad(set_to_none=True)
        overflow = self._locator.locate() if skipped else None
        self._locator.reset()
        return StepResult(skipped, scale, grad_norm, overflow)

    # ------------------------------------------------------------------ state
    @property
    def stats(self) -> dict:
        """{"steps", "skipped", "scale", "scale_min", "scale_max"} — host values, no sync."""
        scale, lowest, highest = self._scaling.scales()
        return {"steps": self._steps, "skipped": self._skipped, "scale": scale, "scale_min": lowest, "scale_max": highest}

    def get_scale(self) -> float:
        """The scaler's real current scale (reads the device tensor: a sync). 1.0 without scaling."""
        return self._scaling.get_scale()

    def state_dict(self) -> dict:
        """Plain Python values only, so checkpoints load with ``torch.load(weights_only=True)``."""
        _, lowest, highest = self._scaling.scales()
        return {"mode": self.mode, "health": self._health.state_dict(), "scaler": self._scaling.state_dict(),
                "steps": self._steps,
                "skipped": self._skipped, "scale_min": lowest, "scale_max": highest,
                **({"fp8": self._fp8.state_dict()} if self._fp8 else {})}

    def load_state_dict(self, state: dict) -> None:
        """Resume from :meth:`state_dict` (or a GradScaler's); bad or corrupt state is one UsageError."""
        load_engine_state(self, state)

    def health(self) -> dict:
        """The loss-scale alarm (:mod:`.alarm`): ``{"status": "ok"|"warning"|"collapsed", "messages", ...}``."""
        out = health_report(self._health, self._steps, self._skipped, self._scaling.scaler is not None)
        unclipped = self._clip_limits.messages()  # a tensor max_grad_norm that was not a number > 0 (a sync)
        if unclipped:
            out["messages"] = out["messages"] + unclipped
            out["status"] = "warning" if out["status"] == "ok" else out["status"]
        return out

    def verify(self, model: torch.nn.Module | None = None, optimizer=None, *, example_input=None) -> list[dict]:
        """The precision contract (:mod:`.contract`): ``[{"where", "expected", "actual", "advice", "check"}]``,
        [] when it holds. Layers: the first forward after prepare()/verify(), or a probe on ``example_input``."""
        return verify_engine(self, model, optimizer, example_input)

    _locator = _NO_LOCATOR  # what a copy has (:mod:`.copying`)
    __getstate__, __setstate__ = engine_state, restore_engine

    def __repr__(self) -> str:
        kept = f", keep_fp32={self._islands.plan.keep_fp32!r}" if self._islands is not None else ""
        return f"MixedPrecision(mode={self.mode!r}, device={str(self.device)!r}{kept})"
