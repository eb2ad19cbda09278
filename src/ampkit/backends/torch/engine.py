"""``ampkit.MixedPrecision``: the training engine for users' own PyTorch loops.

One code path for every mode; the mode only changes which objects go into it (nanoGPT's way):

* fp32 — no autocast, TF32 forced off for the engine's regions, no scaler.
* tf32 — no autocast, TF32 turned on for the engine's regions (flags restored afterwards).
* bf16 — autocast bfloat16, float32 master weights, no scaler.
* fp16 — autocast float16, float32 master weights, dynamic loss scaling by
  ``torch.amp.GradScaler`` (wrapped, not re-implemented).

Host-device syncs: the engine adds none. In fp16 mode GradScaler's ``step()`` does its one
``found_inf.item()`` sync per optimizer; that is the only one. Whether a step was skipped is
learned from an optimizer step hook (no sync), and the loss scale is mirrored on the host from
those skip flags with GradScaler's exact float32 update rule, so ``StepResult.scale`` and
``stats`` are free to read. ``StepResult.grad_norm`` is a device tensor until read (reading it syncs).
"""

from __future__ import annotations

import contextlib
import math
import struct
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ...errors import AutocastDisabledError, ModeUnavailableError
from ...precision import AUTO, Precision, get_precision, parse_mode
from .devices import mode_support, resolve_auto, resolve_device
from .tf32 import tf32_scope

__all__ = ["MixedPrecision", "StepResult"]


_NULL = contextlib.nullcontext()


class _Region:
    """``mp.autocast()``: TF32 flags for fp32/tf32, or torch.autocast checked to be really on."""

    __slots__ = ("_mp", "_ctx", "_math")

    def __init__(self, mp: MixedPrecision):
        self._mp = mp
        dtype = mp._dtype
        if dtype is None:  # fp32 / tf32: only the TF32 flags change
            self._ctx = None
            self._math = mp._math()
        else:  # fp16 / bf16: autocast; these modes leave the TF32 flags alone
            self._ctx = torch.autocast(mp._device_type, dtype=dtype)
            self._math = None

    def __enter__(self):
        ctx = self._ctx
        if ctx is None:
            self._math.__enter__()
            return self
        ctx.__enter__()
        if not torch.is_autocast_enabled(self._mp._device_type):
            ctx.__exit__(None, None, None)
            self._mp._raise_autocast_disabled()
        return self

    def __exit__(self, *exc):
        if self._ctx is not None:
            self._ctx.__exit__(*exc)
        else:
            self._math.__exit__(*exc)
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


def _as_list(obj) -> list:
    if obj is None:
        return []
    if isinstance(obj, (list, tuple)):
        return list(obj)
    return [obj]


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
        self._stepped: dict[int, bool] = {}
        self._hooked: dict[int, Any] = {}
        self._checked_opts: set[int] = set()
        self.model = None
        self._locator = None
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
        """Check the model's master weights and choose the scaler for it (FSDP -> ShardedGradScaler)."""
        self.check_parameters(model.parameters(), where="model")
        if self.precision.loss_scaling and _is_fsdp(model) and not self._sharded:
            if self._steps:
                raise RuntimeError("prepare() with an FSDP model must come before the first step()")
            self._make_scaler(sharded=True)
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
        return _Region(self)

    @contextlib.contextmanager
    def accumulate(self, model: torch.nn.Module | None = None):
        """Skip DDP/FSDP's gradient all-reduce on all but the last micro-batch of an accumulation.

        Use around the forward *and* backward of each micro-batch; the micro-batch index is the
        number of ``backward`` calls since the last ``step``.
        """
        model = model if model is not None else self.model
        last = self._micro + 1 >= self.accumulation_steps
        if last or model is None or not hasattr(model, "no_sync"):
            yield
        else:
            with model.no_sync():
                yield

    def backward(self, loss: torch.Tensor, **kwargs) -> None:
        """Backward of one micro-batch: loss / accumulation_steps, scaled in fp16 mode."""
        if self.accumulation_steps > 1:
            loss = loss / self.accumulation_steps
        with self._math():
            if self.scaler is not None:
                self.scaler.scale(loss).backward(**kwargs)
            else:
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
    def _hook(self, opt: torch.optim.Optimizer) -> None:
        """Learn on the host, without a sync, whether GradScaler called opt.step()."""
        key = id(opt)
        if key in self._hooked or self.scaler is None:
            return

        def mark(optimizer, args, kwargs, _key=key):
            self._stepped[_key] = True

        self._hooked[key] = opt.register_step_post_hook(mark)

    def step(
        self,
        optimizer: torch.optim.Optimizer | Sequence[torch.optim.Optimizer],
        scheduler: Any = None,
        max_grad_norm: float | None = None,
        *,
        zero_grad: bool = False,
    ) -> StepResult:
        """Unscale, clip, step every optimizer, update the scale once, step the scheduler(s).

        Args:
            optimizer: one optimizer or a list (one scaler, one update for all).
            scheduler: an LR scheduler or a list; not stepped when the optimizer step was skipped.
            max_grad_norm: clip the *unscaled* gradients to this total norm (None: no clipping).
            zero_grad: also call ``zero_grad(set_to_none=True)`` on the optimizers afterwards.
        """
        opts = optimizer if isinstance(optimizer, (list, tuple)) else (optimizer,)
        if not opts:
            raise ValueError("step() needs at least one optimizer")
        checked = self._checked_opts
        for opt in opts:
            if id(opt) not in checked:  # once per optimizer: master weights must be float32
                self.check_parameters((p for g in opt.param_groups for p in g["params"]), where="optimizer")
                self._hook(opt)
                checked.add(id(opt))
        scaler = self.scaler
        grad_norm = None
        if max_grad_norm is not None:
            if scaler is not None:
                for opt in opts:
                    scaler.unscale_(opt)
            grad_norm = self._clip(opts, max_grad_norm)
        with self._math():
            if scaler is None:
                for opt in opts:
                    opt.step()
                skipped = False
                scale = 1.0
            else:
                stepped = self._stepped
                skipped = False
                for opt in opts:
                    key = id(opt)
                    stepped[key] = False
                    scaler.step(opt)  # GradScaler's one found_inf.item() sync per optimizer
                    skipped = skipped or not stepped[key]
                scaler.update()
                scale = self._mirror.update(found_inf=skipped)
        self._steps += 1
        self._skipped += int(skipped)
        self._micro = 0
        if scheduler is not None and not skipped:
            for sched in _as_list(scheduler):
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
