"""``ampkit.MixedPrecision``: the training engine for users' own PyTorch loops.

One code path for every mode; the mode only changes which objects go into it (nanoGPT's way):

* fp32 — no autocast, TF32 forced off for the engine's regions, no scaler.
* tf32 — no autocast, TF32 turned on for the engine's regions (flags restored afterwards).
* bf16 — autocast bfloat16, float32 master weights, no scaler.
* fp16 — autocast float16, float32 master weights, dynamic loss scaling by
  ``torch.amp.GradScaler`` (wrapped, not re-implemented).

Host-device syncs, fp16 mode: the engine adds none to what GradScaler does for for-loop and
foreach optimizers, and at most one per step for fused ones, however many there are:

* for-loop and foreach optimizers (``_step_supports_amp_scaling`` false): GradScaler's ``step()``
  reads ``found_inf.item()`` itself and calls ``optimizer.step()`` only when it is zero. The engine
  learns whether that call happened from an optimizer step post-hook: no sync of its own.
* fused optimizers and any optimizer with ``_step_supports_amp_scaling`` (``SGD/Adam/AdamW(fused=True)``):
  GradScaler hands them ``grad_scale``/``found_inf`` and always calls ``step()``; the kernel skips
  on the device, so the post-hook fires either way. The truth lives only in GradScaler's
  per-optimizer ``found_inf``, which the engine reads once per step (one ``.item()`` over all such
  optimizers of the step together) — the same single sync a non-fused ``GradScaler.step`` performs,
  and none when a for-loop/foreach optimizer of the same step already reported the overflow.
* ``capturable`` optimizers go through the same two paths (capturable changes where the optimizer
  keeps its step count, not how GradScaler decides to skip).
* FSDP (``ShardedGradScaler``) with a fused optimizer: the engine calls ``unscale_`` itself before
  ``step`` (one extra unscale pass, no sync), because only ``unscale_`` all-reduces ``found_inf``
  across ranks; without it the ranks could disagree about the skip.

From the skip flag the loss scale is mirrored on the host with GradScaler's exact float32 update
rule, so ``StepResult.scale`` and ``stats`` are free to read and equal ``get_scale()`` after every
step. ``StepResult.grad_norm`` is a device tensor until read (reading it syncs).

Optimizers are followed by identity (weak references), never by ``id()``: a new optimizer per
training phase is followed even when Python hands it a freed optimizer's address, and the
engine keeps no optimizer alive.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import struct
import threading
import warnings
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.amp.grad_scaler import OptState

from ...errors import AutocastDisabledError, ModeUnavailableError
from ...precision import AUTO, Precision, get_precision, parse_mode
from .devices import mode_support, resolve_auto, resolve_device
from .tf32 import tf32_scope

__all__ = ["MixedPrecision", "StepResult"]


_NULL = contextlib.nullcontext()


class _Region:
    """``mp.autocast()``: TF32 flags for fp32/tf32, or torch.autocast checked to be really on.

    One region per engine and thread is reused from step to step (its ``torch.autocast`` is built
    once: its argument checks cost about as much as entering it); entering a region that is
    already entered (nesting) stacks a fresh ``torch.autocast``, so any nesting stays exact.
    """

    __slots__ = ("_mp", "_ctx", "_stack")

    def __init__(self, mp: MixedPrecision):
        self._mp = mp
        dtype = mp._dtype
        # fp32 / tf32: only the TF32 flags change (a fresh scope per entry); fp16 / bf16: autocast,
        # and these modes leave the TF32 flags alone
        self._ctx = None if dtype is None else torch.autocast(mp._device_type, dtype=dtype)
        self._stack: list = []

    def __enter__(self):
        mp = self._mp
        if self._ctx is None:
            ctx = mp._math()
            ctx.__enter__()
            self._stack.append(ctx)
            return self
        ctx = torch.autocast(mp._device_type, dtype=mp._dtype) if self._stack else self._ctx
        ctx.__enter__()
        if not torch.is_autocast_enabled(mp._device_type):
            ctx.__exit__(None, None, None)
            mp._raise_autocast_disabled()
        self._stack.append(ctx)
        return self

    def __exit__(self, *exc):
        self._stack.pop().__exit__(*exc)
        return False


class StepResult:
    """What one optimizer step did.

    Attributes:
        skipped: True when the optimizer step was skipped for inf/NaN gradients (fp16 only).
        scale: the loss scale after this step's update (1.0 without loss scaling).
        grad_norm: the unscaled total gradient norm when clipping was asked for, else None.
            Reading it incurs a host-device sync (it is computed on the device).
    """

    __slots__ = ("skipped", "scale", "_grad_norm", "overflow")

    def __init__(self, skipped: bool, scale: float, grad_norm: torch.Tensor | None, overflow: dict | None = None):
        self.skipped = skipped
        self.scale = scale
        self._grad_norm = grad_norm
        #: with ``locate_overflows()`` on and a skipped step: {"name", "phase"} of the first inf/NaN
        self.overflow = overflow

    @property
    def grad_norm(self) -> float | None:
        if self._grad_norm is None:
            return None
        return float(self._grad_norm)  # host-device sync, on purpose and only when read

    @property
    def grad_norm_tensor(self) -> torch.Tensor | None:
        """The norm as a device tensor (no sync)."""
        return self._grad_norm

    def __repr__(self) -> str:
        norm = "None" if self._grad_norm is None else "<tensor>"
        return f"StepResult(skipped={self.skipped}, scale={self.scale}, grad_norm={norm})"


_F32 = struct.Struct("f")


def _f32(x: float) -> float:
    """Round a Python float to float32 (inf when it overflows float32's range)."""
    try:
        return _F32.unpack(_F32.pack(x))[0]
    except OverflowError:
        return math.inf if x > 0 else -math.inf


@dataclass
class _ScaleMirror:
    """GradScaler's scale and growth tracker, mirrored on the host in float32 arithmetic.

    The update rule is that of ``torch._amp_update_scale_``: on inf/NaN multiply by
    backoff_factor and reset the tracker; otherwise count a clean step and, every
    growth_interval clean steps, multiply by growth_factor when the result is finite.
    """

    scale: float
    growth_factor: float
    backoff_factor: float
    growth_interval: int
    tracker: int = 0
    scale_min: float = field(init=False)
    scale_max: float = field(init=False)

    def __post_init__(self) -> None:
        self.scale = _f32(self.scale)
        self.growth_factor = _f32(self.growth_factor)
        self.backoff_factor = _f32(self.backoff_factor)
        self.scale_min = self.scale_max = self.scale

    def update(self, found_inf: bool) -> float:
        if found_inf:
            self.scale = _f32(self.scale * self.backoff_factor)
            self.tracker = 0
            if self.scale < self.scale_min:
                self.scale_min = self.scale
        else:
            self.tracker += 1
            if self.tracker == self.growth_interval:
                grown = _f32(self.scale * self.growth_factor)
                if math.isfinite(grown):
                    self.scale = grown
                    if grown > self.scale_max:
                        self.scale_max = grown
                self.tracker = 0
        return self.scale


class _Followed:
    """What the engine knows about one optimizer; held in a WeakKeyDictionary keyed by the optimizer.

    ``amp_scaling``: the optimizer takes ``grad_scale``/``found_inf`` from GradScaler and skips on
    the device (fused); its skip is read from ``found_inf``. Otherwise ``stepped`` is set by a step
    post-hook whose closure holds only this object (not the engine, not the optimizer).
    """

    __slots__ = ("amp_scaling", "stepped", "handle", "__weakref__")

    def __init__(self, opt: torch.optim.Optimizer, hook: bool):
        self.amp_scaling = bool(getattr(opt, "_step_supports_amp_scaling", False))
        self.stepped = False
        self.handle = None
        if hook and not self.amp_scaling:
            self.handle = opt.register_step_post_hook(self._mark)

    def _mark(self, optimizer, args, kwargs) -> None:
        self.stepped = True


def _unfollow_all(followed: weakref.WeakKeyDictionary) -> None:
    for f in list(followed.values()):
        if f.handle is not None:
            f.handle.remove()


def _found_inf(scaler, opt) -> list[torch.Tensor]:
    """GradScaler's per-optimizer found_inf tensors of this step (device tensors, no sync).

    GradScaler keeps them in ``_per_optimizer_states[id(optimizer)]`` from ``unscale_``/``step``
    until ``update()``; there is no public accessor (pytorch #67590).
    """
    try:
        per_device = scaler._per_optimizer_states[id(opt)]["found_inf_per_device"]
    except (AttributeError, KeyError) as exc:  # pragma: no cover - a torch that changed its internals
        raise RuntimeError(
            "cannot read GradScaler's found_inf for a fused optimizer in this torch version; "
            "use a for-loop or foreach optimizer (fused=False) with ampkit, and report the torch version"
        ) from exc
    return list(per_device.values())


def _any_inf(found: list[torch.Tensor]) -> bool:
    """True when any found_inf flag is set. One host-device sync for all of them."""
    if len(found) == 1:
        return bool(found[0].item())  # host-device sync
    device = found[0].device
    return bool(torch.stack([t.to(device, non_blocking=True).reshape(()) for t in found]).sum().item())  # sync


def _check_scaler_args(init_scale, growth_factor, backoff_factor, growth_interval) -> None:
    """GradScaler's own argument rules, applied whatever the mode (it only checks when created)."""
    problems = []
    if not (isinstance(init_scale, numbers.Real) and math.isfinite(init_scale) and init_scale > 0):
        problems.append(f"init_scale must be a finite number > 0, received {init_scale!r}")
    if not (isinstance(growth_factor, numbers.Real) and growth_factor > 1.0):
        problems.append(f"growth_factor must be > 1.0, received {growth_factor!r}")
    if not (isinstance(backoff_factor, numbers.Real) and 0.0 < backoff_factor < 1.0):
        problems.append(f"backoff_factor must be in (0, 1), received {backoff_factor!r}")
    if not (isinstance(growth_interval, numbers.Integral) and not isinstance(growth_interval, bool)
            and growth_interval > 0):
        problems.append(f"growth_interval must be an int > 0, received {growth_interval!r}")
    if problems:
        raise ValueError("; ".join(problems) + " (the same rules as torch.amp.GradScaler)")


def _is_plateau(sched) -> bool:
    return isinstance(sched, torch.optim.lr_scheduler.ReduceLROnPlateau)


def _is_fsdp(model) -> bool:
    if model is None:
        return False
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
    except Exception:  # pragma: no cover - torch without distributed
        return False
    if isinstance(model, FullyShardedDataParallel):
        return True
    try:
        from torch.distributed.fsdp import FSDPModule  # FSDP2 (fully_shard)
    except Exception:
        return False
    return isinstance(model, FSDPModule)


class MixedPrecision:
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
    ) -> None:
        self.device = resolve_device(device)
        requested = parse_mode(mode)
        if requested == AUTO:
            resolved, self.reason = resolve_auto(self.device)
        else:
            resolved = requested
            ok, why = mode_support(resolved, self.device)
            if not ok:
                raise ModeUnavailableError(f"mode {resolved!r} cannot run on {self.device}: {why}")
            self.reason = f"{resolved} requested ({why})"
        if resolved == "fp8":
            raise ModeUnavailableError(
                "fp8 training is not provided by the engine (ampkit doctor reports fp8 capability only); "
                "use bf16 or fp16"
            )
        if accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be >= 1, received {accumulation_steps}")
        # checked in every mode, so that "auto" accepts or refuses the same arguments on every device
        _check_scaler_args(init_scale, growth_factor, backoff_factor, growth_interval)
        self.precision: Precision = get_precision(resolved)
        self.accumulation_steps = int(accumulation_steps)
        self._scaler_kwargs = dict(
            init_scale=float(init_scale),
            growth_factor=float(growth_factor),
            backoff_factor=float(backoff_factor),
            growth_interval=int(growth_interval),
        )
        self._dtype = getattr(torch, self.precision.compute_dtype) if self.precision.autocast else None
        self._device_type = self.device.type
        self._sharded = False
        self.scaler = None
        self._mirror: _ScaleMirror | None = None
        self._make_scaler(sharded=False)
        self._steps = 0
        self._skipped = 0
        self._micro = 0
        #: optimizers seen by step(), by identity; an entry dies with its optimizer
        self._followed: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        weakref.finalize(self, _unfollow_all, self._followed)  # an engine gone leaves no hook behind
        self._last_followed: tuple | None = None
        self.model = None
        self._locator = None
        self._local = threading.local()  # the reused autocast region, one per thread
        if model is not None:
            self.prepare(model)

    # ------------------------------------------------------------------ set-up
    @property
    def mode(self) -> str:
        return self.precision.mode

    def _make_scaler(self, *, sharded: bool) -> None:
        if not self.precision.loss_scaling:
            self.scaler = None
            self._mirror = None
            return
        kw = self._scaler_kwargs
        if sharded:
            from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

            self.scaler = ShardedGradScaler(self.device.type, **kw)
        else:
            self.scaler = torch.amp.GradScaler(self.device.type, **kw)
        self._sharded = sharded
        self._mirror = _ScaleMirror(kw["init_scale"], kw["growth_factor"], kw["backoff_factor"], kw["growth_interval"])

    def prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        """Check the model's master weights and choose the scaler for it (FSDP -> ShardedGradScaler).

        May come before or after :meth:`load_state_dict`, and between steps: moving to the sharded
        scaler carries the scale, the growth tracker and the statistics over.
        """
        self.check_parameters(model.parameters(), where="model")
        if self.precision.loss_scaling and _is_fsdp(model) and not self._sharded:
            if self._micro:
                raise RuntimeError(
                    "prepare() with an FSDP model was called between backward() and step(); "
                    "call it before the first backward() of a step (best: right after creating the model)"
                )
            state = self.scaler.state_dict()  # plain values; reads the scale once if one exists (a sync)
            mirror = self._mirror
            self._make_scaler(sharded=True)
            self.scaler.load_state_dict(state)
            self._mirror = mirror  # the same scale, tracker and min/max
        self.model = model
        return model

    def locate_overflows(self, model: torch.nn.Module | None = None, enabled: bool = True) -> None:
        """Opt in: after a skipped step, ``StepResult.overflow`` names the module whose output (or
        gradient) held the first inf/NaN. Off by default and free when off; on, it adds one small
        reduction per module output and reads them (a sync) only after a skipped step."""
        if self._locator is not None:
            self._locator.remove()
            self._locator = None
        if enabled:
            from .numerics.locate import OverflowLocator

            target = model if model is not None else self.model
            if target is None:
                raise ValueError("locate_overflows() needs the model (or MixedPrecision(..., model=model))")
            self._locator = OverflowLocator(target)

    def check_parameters(self, params: Iterable[torch.Tensor], where: str = "optimizer") -> None:
        """Raise when mixed precision is asked for but the master weights are not float32."""
        if not self.precision.autocast:
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
    def autocast(self) -> _Region:
        """The forward region for this mode (use as ``with mp.autocast():``).

        Raises AutocastDisabledError if torch switched autocast off (it only warns, e.g. CUDA
        autocast without CUDA): a mode is never allowed to fall back silently.
        """
        local = self._local
        region = getattr(local, "region", None)
        if region is None:
            region = local.region = _Region(self)
        return region

    @contextlib.contextmanager
    def accumulate(self, model: torch.nn.Module | None = None):
        """Skip the gradient communication on all but the last micro-batch of an accumulation.

        DDP and FSDP1: ``no_sync()``; FSDP2 (``fully_shard``): ``set_requires_gradient_sync(False)``,
        so gradients accumulate unsharded and are reduce-scattered once, on the last micro-batch.

        Use around the forward *and* backward of each micro-batch; the micro-batch index is the
        number of ``backward`` calls since the last ``step``.
        """
        model = model if model is not None else self.model
        last = self._micro + 1 >= self.accumulation_steps
        if last or model is None:
            yield
        elif hasattr(model, "no_sync"):  # DDP, FSDP1
            with model.no_sync():
                yield
        elif hasattr(model, "set_requires_gradient_sync"):  # FSDP2 (fully_shard): no reduce-scatter
            model.set_requires_gradient_sync(False)
            try:
                yield
            finally:  # the backward ran inside the block; the next micro-batch decides again
                model.set_requires_gradient_sync(True)
        else:
            yield

    def backward(self, loss: torch.Tensor, **kwargs) -> None:
        """Backward of one micro-batch: loss / accumulation_steps, scaled in fp16 mode."""
        if self.accumulation_steps > 1:
            loss = loss / self.accumulation_steps
        if self.scaler is not None:
            loss = self.scaler.scale(loss)
        if self.precision.tf32 is None:
            loss.backward(**kwargs)
        else:
            with tf32_scope(self.precision.tf32):
                loss.backward(**kwargs)
        self._micro += 1

    def _raise_autocast_disabled(self):
        dev = self._device_type
        with warnings.catch_warnings(record=True) as caught:  # only now: learn why
            warnings.simplefilter("always")
            torch.autocast(dev, dtype=self._dtype)
        said = "; ".join(str(w.message) for w in caught) or "autocast reports itself disabled"
        raise AutocastDisabledError(
            f"torch.autocast({dev!r}, dtype={self._dtype}) did not turn on ({said}); "
            f"refusing to run {self.mode} as float32"
        )

    def _math(self):
        """TF32 on/off for tf32/fp32 modes; a shared no-op context for the others."""
        return _NULL if self.precision.tf32 is None else tf32_scope(self.precision.tf32)

    @property
    def sync_gradients(self) -> bool:
        """True when the next backward completes an accumulation (the step should follow)."""
        return self._micro + 1 >= self.accumulation_steps

    # ------------------------------------------------------------------ step
    def _follow(self, opt: torch.optim.Optimizer) -> _Followed:
        """The engine's record of ``opt``, made on first sight (master weights checked once)."""
        followed = self._followed.get(opt)
        if followed is None:
            self.check_parameters((p for g in opt.param_groups for p in g["params"]), where="optimizer")
            followed = self._followed[opt] = _Followed(opt, hook=self.scaler is not None)
        return followed

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
        if scheduler is None:
            scheds = ()
        else:
            scheds = scheduler if isinstance(scheduler, (list, tuple)) else (scheduler,)
            if metric is None and any(_is_plateau(sched) for sched in scheds):
                raise ValueError(
                    "ReduceLROnPlateau needs the monitored value: call mp.step(optimizer, scheduler, "
                    "metric=val_loss) (or step that scheduler yourself with sched.step(val_loss))"
                )
        last = self._last_followed  # (weak reference to the optimizers, their records): the usual case
        if last is not None and len(opts) == 1 and last[0]() is opts[0]:
            followed = last[1]
        else:
            known = self._followed
            followed = [known.get(opt) or self._follow(opt) for opt in opts]  # master weights checked first
            self._last_followed = (weakref.ref(opts[0]), followed) if len(opts) == 1 else None
        scaler = self.scaler
        grad_norm = None
        if max_grad_norm is not None:
            if scaler is not None:
                for opt in opts:
                    self._unscale(scaler, opt)
            grad_norm = self._clip(opts, max_grad_norm)
        if self.precision.tf32 is None:
            skipped, scale = self._step_all(scaler, opts, followed)
        else:
            with tf32_scope(self.precision.tf32):
                skipped, scale = self._step_all(scaler, opts, followed)
        self._steps += 1
        if skipped:
            self._skipped += 1
        self._micro = 0
        if not skipped:
            for sched in scheds:
                if _is_plateau(sched):
                    sched.step(metric)
                else:
                    sched.step()
        if zero_grad:
            for opt in opts:
                opt.zero_grad(set_to_none=True)
        overflow = None
        if self._locator is not None:
            if skipped:
                overflow = self._locator.locate()
            self._locator.reset()
        return StepResult(skipped, scale, grad_norm, overflow)

    def _step_all(self, scaler, opts, followed) -> tuple[bool, float]:
        """Step every optimizer (through the scaler in fp16); (skipped, the scale after the update)."""
        if scaler is None:
            for opt in opts:
                opt.step()
            return False, 1.0
        skipped = False
        device_found = []
        for opt, f in zip(opts, followed):
            if f.amp_scaling:
                if self._sharded:
                    # ShardedGradScaler all-reduces found_inf across ranks only in unscale_(), not in
                    # the fused path of step(): unscale here so that every rank skips together
                    self._unscale(scaler, opt)
                scaler.step(opt)  # fused: no sync; the kernel skips on the device when found_inf
                device_found.extend(_found_inf(scaler, opt))
            else:
                f.stepped = False
                scaler.step(opt)  # GradScaler's one found_inf.item() sync for this optimizer
                if not f.stepped:
                    skipped = True
        if device_found and not skipped:
            skipped = _any_inf(device_found)
        scaler.update()
        return skipped, self._mirror.update(skipped)

    def _unscale(self, scaler, opt) -> None:
        """``scaler.unscale_(opt)`` once per step (no sync; ShardedGradScaler all-reduces found_inf)."""
        state = scaler._per_optimizer_states[id(opt)]
        if state["stage"] is not OptState.READY:
            return
        scaler.unscale_(opt)
        if self._sharded:
            # ShardedGradScaler makes found_inf of shape (1,); fused kernels need the () of
            # GradScaler ("output with shape [] doesn't match the broadcast shape [1]"). A view.
            per_device = state["found_inf_per_device"]
            for dev, flag in per_device.items():
                per_device[dev] = flag.reshape(())

    def _clip(self, opts, max_norm: float) -> torch.Tensor:
        model = self.model
        if model is not None and hasattr(model, "clip_grad_norm_") and _is_fsdp(model):
            return model.clip_grad_norm_(max_norm)  # FSDP1: norm across shards
        params = [p for opt in opts for g in opt.param_groups for p in g["params"] if p.grad is not None]
        # foreach norm on the device; returns a tensor, no host sync
        return torch.nn.utils.clip_grad_norm_(params, max_norm)

    # ------------------------------------------------------------------ state
    @property
    def stats(self) -> dict:
        """{"steps", "skipped", "scale", "scale_min", "scale_max"} — host values, no sync."""
        if self._mirror is None:
            scale = smin = smax = 1.0
        else:
            scale, smin, smax = self._mirror.scale, self._mirror.scale_min, self._mirror.scale_max
        return {"steps": self._steps, "skipped": self._skipped, "scale": scale, "scale_min": smin, "scale_max": smax}

    def get_scale(self) -> float:
        """The scaler's real current scale (reads the device tensor: a sync). 1.0 without scaling."""
        if self.scaler is None:
            return 1.0
        return float(self.scaler.get_scale())

    def state_dict(self) -> dict:
        """Plain Python values only, so checkpoints load with ``torch.load(weights_only=True)``."""
        scaler_sd = None
        if self.scaler is not None:
            scaler_sd = {k: (float(v) if isinstance(v, float) else v) for k, v in self.scaler.state_dict().items()}
        return {
            "mode": self.mode,
            "scaler": scaler_sd,
            "steps": self._steps,
            "skipped": self._skipped,
            "scale_min": self._mirror.scale_min if self._mirror else 1.0,
            "scale_max": self._mirror.scale_max if self._mirror else 1.0,
        }

    def load_state_dict(self, state: dict) -> None:
        if state.get("mode") != self.mode:
            raise ValueError(
                f"this state was saved in mode {state.get('mode')!r} but the engine runs {self.mode!r}; "
                "create MixedPrecision with the same mode to resume"
            )
        self._steps = int(state.get("steps", 0))
        self._skipped = int(state.get("skipped", 0))
        sd = state.get("scaler")
        if self.scaler is not None and sd:
            self.scaler.load_state_dict(sd)
            m = self._mirror
            m.scale = _f32(sd["scale"])
            m.growth_factor = _f32(sd["growth_factor"])
            m.backoff_factor = _f32(sd["backoff_factor"])
            m.growth_interval = int(sd["growth_interval"])
            m.tracker = int(sd["_growth_tracker"])
            m.scale_min = float(state.get("scale_min", sd["scale"]))
            m.scale_max = float(state.get("scale_max", sd["scale"]))

    def __repr__(self) -> str:
        return f"MixedPrecision(mode={self.mode!r}, device={str(self.device)!r})"
