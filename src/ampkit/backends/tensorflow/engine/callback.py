"""The Keras engine's ``fit`` callback: the loss scale after every batch, the skipped steps, the alarm."""

from __future__ import annotations

from ....errors import UsageError
from ....health import LossScaleHealth
from ..flavor import Flavor, flavor_of, keras3

#: as the torch engine's alarm says it (issue #50): the audit first; bf16 only as something to check, never as
#: the cure (its coarser precision may not train this model)
KERAS_ADVICE = ("Find the layer that overflows with `ampkit audit --framework tensorflow --model MODULE:FACTORY "
                "--mode fp16` (add --input-shape for a bare model). bf16 needs no loss scaling: consider "
                "ampkit.keras.MixedPrecision('bf16') where the device runs it, once `ampkit audit --framework tensorflow "
                "--model MODULE:FACTORY --mode bf16` shows it healthy on this model.")


def keras_health(min_scale_warning: float = 1.0, consecutive_skip_warning: int = 10,
                 source: str = "ampkit.keras.MixedPrecision") -> LossScaleHealth:
    return LossScaleHealth(min_scale_warning=min_scale_warning, consecutive_skip_warning=consecutive_skip_warning,
                           advice=KERAS_ADVICE, source=source)


def loss_scale_of(optimizer) -> float | None:
    """The current dynamic loss scale of a (possibly wrapped) optimizer of either Keras, None without
    scaling. Reads a variable: a host-device sync."""
    flavor = flavor_of(optimizer)
    return flavor.loss_scale(optimizer) if flavor is not None else None


def refuse_unscaled_float16(model, optimizer) -> None:
    """One line when ``model`` computes in float16 and ``optimizer`` does not scale the loss."""
    from .contract import loss_scaling_finding

    finding = loss_scaling_finding(model, optimizer)
    if finding:
        raise UsageError(f"ampkit.keras: {finding['actual']}: training it would lose small gradients to float16 "
                         f"underflow; {finding['advice']}")


class _History:
    """Records the loss scale after every training batch and counts skipped steps.

    Keras's LossScaleOptimizer halves the scale exactly when a step had non-finite gradients
    and was skipped, so a step is counted as skipped when the scale went down (or, at tf_keras's
    floor of 1, stayed while its growth counter restarted). Reading the scale is a host-device
    sync, once per batch. ``health``: the alarm fed from those values (a new one
    with the default thresholds when not given).
    """

    def __init__(self, health: LossScaleHealth | None = None):
        super().__init__()
        self.scales: list[float] = []
        self.skipped: list[bool] = []
        self.health = health if health is not None else keras_health(source="ampkit.keras.LossScaleHistory")
        self.hooks: list = []
        self._last = None

    def on_train_begin(self, logs=None):
        opt = self.model.optimizer
        refuse_unscaled_float16(self.model, opt)
        flavor = flavor_of(opt) if opt is not None else None
        if flavor is not None and not flavor.legacy and flavor.is_loss_scale_optimizer(opt):
            # one compile made itself (a mixed_float16 model): ampkit's cross-replica skip, before fit traces
            from .scaling import upgrade

            upgrade(opt)
        self._last = loss_scale_of(opt)
        self._n0, self.base_step = len(self.scales), iterations_of(opt)

    def on_train_batch_end(self, batch, logs=None):
        scale = loss_scale_of(self.model.optimizer)
        if scale is None:
            return
        skipped = flavor_of(self.model.optimizer).skipped(self.model.optimizer, self._last, scale)
        step = getattr(self, "base_step", 0) + len(self.scales) - getattr(self, "_n0", 0) + 1
        self.skipped.append(skipped)
        self.scales.append(scale)
        self.health.observe(step, scale, skipped, scale_used=self._last)
        self._last = scale
        for hook in self.hooks:
            hook(self, step, scale, skipped)

    @property
    def skipped_steps(self) -> int:
        return sum(self.skipped)


def iterations_of(optimizer) -> int:
    """The optimizer's step counter (Keras's global step; 0 where it cannot be read). One read, at
    the start of ``fit``."""
    it = getattr(optimizer, "iterations", None)
    if it is None:
        return 0
    for read in (lambda v: v.numpy(), lambda v: __import__("keras").ops.convert_to_numpy(v), lambda v: v):
        try:
            return int(read(it))
        except Exception:
            continue
    return 0


_HISTORY: dict[str, type] = {}


def history_class(flavor: Flavor) -> type:
    """The loss-scale history callback for one Keras: each Keras's ``fit`` takes only its own callbacks."""
    if flavor.name not in _HISTORY:
        _HISTORY[flavor.name] = type("LossScaleHistory", (_History, flavor.callback_base),
                                     {"__doc__": _History.__doc__, "__module__": "ampkit.keras"})
    return _HISTORY[flavor.name]


try:  # Keras 3's callback at import time, for ``ampkit.keras.LossScaleHistory``
    LossScaleHistory = history_class(keras3())
except Exception:  # pragma: no cover - keras absent: the engine module still imports
    LossScaleHistory = _History
