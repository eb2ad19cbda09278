"""The engine's loss-scale alarm: :class:`ampkit.health.LossScaleHealth` fed from the host mirror.

fp16 only (the other modes have no loss scale to collapse). :class:`~.scaling.LossScaling` feeds it
once per step with the values it already holds on the host — the step's number, the scale after the
update, whether the step was skipped, the scale the step ran with — so the alarm adds no host-device
sync. The warning's advice is written when it fires (:class:`TorchAdvice`): bf16 where this device
runs it, the ``ampkit audit`` command line for the model given to ``prepare``, and the init_scale
that fits (the last from :mod:`ampkit.health`)."""

from __future__ import annotations

from ....health import LossScaleHealth

__all__ = ["TorchAdvice", "engine_health", "health_report"]


class TorchAdvice:
    """What to do about a collapsed scale, written when the alarm fires (plain values: it pickles).

    ``model``: ``"module:Class"`` of the model given to ``prepare`` (set there), else None.
    """

    __slots__ = ("device", "model")

    def __init__(self, device: str) -> None:
        self.device = device
        self.model: str | None = None

    def __call__(self) -> str:
        import torch

        from ..devices import mode_support

        try:
            bf16, why = mode_support("bf16", torch.device(self.device))
        except Exception as exc:  # pragma: no cover - a device that cannot be asked
            bf16, why = False, str(exc)
        if bf16:
            first = ('Switch to bf16, which this device runs and which needs no loss scaling: '
                     'ampkit.MixedPrecision("bf16").')
        else:
            first = f"bf16 needs no loss scaling but this device cannot run it ({why}); use it on one that can."
        target = f"--model {self.model}" if self.model else "--model MODULE:FACTORY"
        return (f"{first} Find the layer that overflows with "
                f"`ampkit audit {target} --mode fp16 --device {self.device}` "
                "(add --input-shape for a bare model).")


def engine_health(device, min_scale_warning, consecutive_skip_warning) -> LossScaleHealth:
    """The alarm of one engine (raises ValueError for thresholds out of range, naming the keyword)."""
    return LossScaleHealth(min_scale_warning=min_scale_warning, consecutive_skip_warning=consecutive_skip_warning,
                           advice=TorchAdvice(str(device)), source="ampkit.MixedPrecision")


def model_path(model) -> str | None:
    """``module:Class`` of a model an ``ampkit audit --model`` can import, else None (``__main__``,
    a local class)."""
    cls = type(model)
    top = cls.__module__.partition(".")[0]
    if top in ("__main__", "builtins", "torch", "torchvision", "transformers", "timm") or "<locals>" in cls.__qualname__:
        return None
    return f"{cls.__module__}:{cls.__qualname__}"


def health_report(health: LossScaleHealth, steps: int, skipped: int, loss_scaling: bool) -> dict:
    """``mp.health()``: the alarm's report, with the engine's own step counts (which survive a
    checkpoint saved before the alarm existed) and whether this mode scales the loss at all."""
    out = health.report()
    out.update(steps=steps, skipped=skipped, loss_scaling=loss_scaling)
    if not loss_scaling:
        out["scale"] = 1.0
    return out
