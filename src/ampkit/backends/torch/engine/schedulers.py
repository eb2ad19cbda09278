"""LR schedulers stepped by the engine: only after an optimizer step that was taken."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["schedulers_of", "step_schedulers"]


def _is_plateau(sched) -> bool:
    return isinstance(sched, torch.optim.lr_scheduler.ReduceLROnPlateau)


def schedulers_of(scheduler: Any, metric: Any) -> tuple | list:
    """The schedulers given to ``step`` (one or a list) as a sequence, checked before anything steps.

    Raises:
        ValueError: a ``ReduceLROnPlateau`` among them and no ``metric`` to step it with.
    """
    scheds = scheduler if isinstance(scheduler, (list, tuple)) else (scheduler,)
    if metric is None and any(_is_plateau(sched) for sched in scheds):
        raise ValueError(
            "ReduceLROnPlateau needs the monitored value: call mp.step(optimizer, scheduler, "
            "metric=val_loss) (or step that scheduler yourself with sched.step(val_loss))"
        )
    return scheds


def step_schedulers(scheds, metric: Any, skipped: bool) -> None:
    """Step each scheduler, the plateau ones with ``metric``; none when the optimizer step was skipped."""
    if skipped:
        return
    for sched in scheds:
        if _is_plateau(sched):
            sched.step(metric)
        else:
            sched.step()
