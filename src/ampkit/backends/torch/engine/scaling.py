"""Loss scaling for the engine: ``torch.amp.GradScaler`` wrapped (fp16), or nothing at all (the others).

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
* FSDP (``ShardedGradScaler``) with a fused optimizer: :class:`ShardedLossScaling` calls ``unscale_``
  itself before ``step`` (one extra unscale pass, no sync), because only ``unscale_`` all-reduces
  ``found_inf`` across ranks; without it the ranks could disagree about the skip."""

from __future__ import annotations

import math
import numbers
import struct
from dataclasses import dataclass, field

import torch
from torch.amp.grad_scaler import OptState

from .scaler_state import found_inf, in_step, optimizer_state

__all__ = ["LossScaling", "NoScaling", "ShardedLossScaling", "scaling_for"]

_F32 = struct.Struct("f")


def _f32(x: float) -> float:
    """Round a Python float to float32 (inf when it overflows float32's range)."""
    try:
        return _F32.unpack(_F32.pack(x))[0]
    except OverflowError:
        return math.inf if x > 0 else -math.inf


@dataclass
class _ScaleMirror:
    """GradScaler's scale and growth tracker, mirrored on the host with the scaler's own arithmetic.

    ``torch._amp_update_scale_`` (``aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp`` and
    ``cuda/AmpKernels.cu``) takes the factors as C++ ``double``: it multiplies the float32 scale by
    the factor in double precision and rounds the product to float32 when it stores it; on inf/NaN it
    multiplies by backoff_factor and resets the tracker, otherwise it counts a clean step and, every
    growth_interval clean steps, multiplies by growth_factor when the float32 result is finite.
    A Python float is a double, so ``_f32(scale * factor)`` is that arithmetic bit for bit.

    ``ShardedGradScaler`` on a CPU does not call the kernel but its Python fallback
    (``_amp_update_scale_cpu_``): ``scale_tensor *= factor``, a float32 tensor times a Python scalar,
    which torch computes in float32 (the factor rounded to float32 first) and lets grow to inf.
    ``float32_factors=True`` mirrors that rule.

    The factors are read from the scaler at every update (``update(found_inf, scaler)``), so
    ``set_growth_factor()`` and friends and a loaded ``state_dict`` are followed too.
    """

    scale: float
    tracker: int = 0
    float32_factors: bool = False
    scale_min: float = field(init=False)
    scale_max: float = field(init=False)

    def __post_init__(self) -> None:
        self.scale = _f32(self.scale)
        self.scale_min = self.scale_max = self.scale

    def update(self, found_inf: bool, scaler) -> float:
        if found_inf:
            backoff = scaler.get_backoff_factor()
            self.scale = _f32(self.scale * (_f32(backoff) if self.float32_factors else backoff))
            self.tracker = 0
            if self.scale < self.scale_min:
                self.scale_min = self.scale
        else:
            self.tracker += 1
            if self.tracker == scaler.get_growth_interval():
                growth = scaler.get_growth_factor()
                if self.float32_factors:  # the Python fallback grows without a finiteness check
                    grown = _f32(self.scale * _f32(growth))
                else:
                    grown = _f32(self.scale * growth)
                    if not math.isfinite(grown):
                        grown = self.scale
                self.scale = grown
                if grown > self.scale_max:
                    self.scale_max = grown
                self.tracker = 0
        return self.scale

    def load(self, sd: dict, scale_min: float, scale_max: float) -> None:
        """Take the values of a GradScaler ``state_dict`` (and the engine's saved min/max). The scaler
        stores the scale with ``fill_`` into a float32 tensor: rounded to float32 here too."""
        self.scale = _f32(sd["scale"])
        self.tracker = int(sd["_growth_tracker"])
        self.scale_min = float(scale_min)
        self.scale_max = float(scale_max)


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


class NoScaling:
    """fp32, tf32, bf16: no loss scaling. Every hook does nothing; the scale is always 1.0."""

    scaler = None
    #: whether :meth:`step` needs to learn from a step post-hook that an optimizer stepped
    follows_steps = False
    #: whether an FSDP model calls for :meth:`sharded`
    shards_for_fsdp = False
    def scales(self) -> tuple[float, float, float]:
        """(scale, lowest, highest): always 1.0."""
        return 1.0, 1.0, 1.0

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        return loss

    def unscale_all(self, opts) -> None:
        pass

    def step(self, opts, followed, step: int) -> tuple[bool, float]:
        """Step every optimizer; (skipped, the scale after the update): never skipped, scale 1.0."""
        for opt in opts:
            opt.step()
        return False, 1.0

    def get_scale(self) -> float:
        return 1.0

    def state_dict(self) -> None:
        return None

    def load_state_dict(self, state: dict) -> None:
        pass


class LossScaling:
    """fp16: dynamic loss scaling by ``torch.amp.GradScaler`` and its scale mirrored on the host."""

    follows_steps = True
    shards_for_fsdp = True

    def __init__(self, device_type: str, kwargs: dict, health=None) -> None:
        self._device_type = device_type
        self._kwargs = kwargs
        #: the loss-scale alarm (:mod:`.alarm`), fed at every step from the host mirror; None: unwatched
        self.health = health
        self.scaler = self._make_scaler()
        self._mirror = _ScaleMirror(kwargs["init_scale"], float32_factors=self._float32_factors())

    def _make_scaler(self):
        return torch.amp.GradScaler(self._device_type, **self._kwargs)

    def _float32_factors(self) -> bool:
        """Whether this scaler updates with float32 factors (see :class:`_ScaleMirror`): GradScaler never."""
        return False

    def __getstate__(self) -> dict:
        """Pickled as GradScaler's ``state_dict`` (plain values; reading the scale is a sync), rebuilt
        by :meth:`__setstate__`: a ``ShardedGradScaler`` holds a process group, which does not pickle."""
        if in_step(self.scaler):
            raise RuntimeError("a MixedPrecision can be copied or pickled only between steps, not between "
                               "unscale/step and the end of mp.step() (as for torch.amp.GradScaler)")
        state = self.__dict__.copy()
        state.pop("_loss", None)  # a device tensor of the last step: not the scaler's state
        state["scaler"] = self.scaler.state_dict()
        return state

    def __setstate__(self, state: dict) -> None:
        saved = state.pop("scaler")
        self.__dict__.update(state)
        self.scaler = self._make_scaler()
        self.scaler.load_state_dict(saved)

    def scales(self) -> tuple[float, float, float]:
        """(scale, lowest, highest) from the host mirror: no sync."""
        m = self._mirror
        return m.scale, m.scale_min, m.scale_max

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        self._loss = loss.detach()  # held, never read unless the alarm fires (then one sync): see step()
        return self.scaler.scale(loss)

    def _loss_finite(self) -> bool | None:
        loss = getattr(self, "_loss", None)
        return None if loss is None else bool(torch.isfinite(loss).all())

    def unscale(self, opt) -> dict | None:
        """``scaler.unscale_(opt)`` once per step (no sync); GradScaler's state for ``opt`` when it
        unscaled now, None when this step had unscaled it already."""
        state = optimizer_state(self.scaler, opt, create=True)
        if state["stage"] is not OptState.READY:
            return None
        self.scaler.unscale_(opt)
        return state

    def unscale_all(self, opts) -> None:
        """Unscale the gradients before clipping, so that the clip sees their true norm."""
        for opt in opts:
            self.unscale(opt)

    def _before_fused_step(self, opt) -> None:
        pass

    def step(self, opts, followed, step: int) -> tuple[bool, float]:
        """Step every optimizer through the scaler, update the scale once; (skipped, the scale after the
        update). ``step``: the step's number (1-based), for the alarm."""
        scaler = self.scaler
        skipped = False
        device_found = []
        for opt, f in zip(opts, followed):
            if f.amp_scaling:
                self._before_fused_step(opt)
                scaler.step(opt)  # fused: no sync; the kernel skips on the device when found_inf
                device_found.extend(found_inf(scaler, opt))
            else:
                f.stepped = False
                scaler.step(opt)  # GradScaler's one found_inf.item() sync for this optimizer
                if not f.stepped:
                    skipped = True
        if device_found and not skipped:
            skipped = _any_inf(device_found)
        scaler.update()
        used = self._mirror.scale
        scale = self._mirror.update(skipped, scaler)
        if self.health is not None:
            self.health.observe(step, scale, skipped, scale_used=used, forward_finite=self._loss_finite)
        return skipped, scale

    def get_scale(self) -> float:
        """The scaler's real current scale (reads the device tensor: a sync)."""
        return float(self.scaler.get_scale())

    def state_dict(self) -> dict:
        """GradScaler's state in plain Python values (``torch.load(weights_only=True)`` loads it)."""
        return {k: (float(v) if isinstance(v, float) else v) for k, v in self.scaler.state_dict().items()}

    def load_state_dict(self, state: dict) -> None:
        """Resume from an engine ``state_dict`` (its ``scaler`` entry and the saved min/max scale)."""
        sd = state.get("scaler")
        if not sd:
            return
        self.scaler.load_state_dict(sd)
        self._mirror.load(sd, state.get("scale_min", sd["scale"]), state.get("scale_max", sd["scale"]))

    def sharded(self) -> ShardedLossScaling:
        """The same scaling through ``ShardedGradScaler`` (FSDP): the scale, the growth tracker and
        the statistics carry over. Reads the scale once if one exists (a sync)."""
        state = self.scaler.state_dict()
        new = ShardedLossScaling(self._device_type, self._kwargs, self.health)
        new.scaler.load_state_dict(state)
        self._mirror.float32_factors = new._float32_factors()
        new._mirror = self._mirror
        return new


class ShardedLossScaling(LossScaling):
    """fp16 with an FSDP model: ``ShardedGradScaler``, whose ``unscale_`` all-reduces found_inf across ranks."""

    shards_for_fsdp = False  # sharded already

    def _make_scaler(self):
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        return ShardedGradScaler(self._device_type, **self._kwargs)

    def _float32_factors(self) -> bool:
        # on a CPU, ShardedGradScaler.update runs its Python fallback, _amp_update_scale_cpu_
        return self._device_type == "cpu"

    def unscale(self, opt) -> dict | None:
        state = super().unscale(opt)
        if state is not None:
            # ShardedGradScaler makes found_inf of shape (1,); fused kernels need the () of
            # GradScaler ("output with shape [] doesn't match the broadcast shape [1]"). A view.
            per_device = state["found_inf_per_device"]
            for dev, flag in per_device.items():
                per_device[dev] = flag.reshape(())
        return state

    def _before_fused_step(self, opt) -> None:
        # ShardedGradScaler all-reduces found_inf across ranks only in unscale_(), not in the fused
        # path of step(): unscale here so that every rank skips together
        self.unscale(opt)


def scaling_for(loss_scaling: bool, device_type: str, *, init_scale, growth_factor, backoff_factor,
                growth_interval, health=None) -> LossScaling | NoScaling:
    """The scaling of a mode (``Precision.loss_scaling``). The arguments are checked in every mode, so
    that ``auto`` accepts or refuses the same ones on every device."""
    _check_scaler_args(init_scale, growth_factor, backoff_factor, growth_interval)
    if not loss_scaling:
        return NoScaling()
    kwargs = dict(init_scale=float(init_scale), growth_factor=float(growth_factor),
                  backoff_factor=float(backoff_factor), growth_interval=int(growth_interval))
    return LossScaling(device_type, kwargs, health)
