"""GradScaler's private state, read in one place.

``torch.amp.GradScaler`` has no public accessor for what a step needs to know between ``unscale_``
and ``update`` (pytorch #67590): the per-optimizer ``stage`` and ``found_inf`` live in
``_per_optimizer_states[id(optimizer)]``, and the current scale as a device tensor in ``_scale``
(``get_scale()`` would sync). The engine (:mod:`.scaling`) and the trainer integrations
(:mod:`..integrations`) read them through these functions only, so that a torch that changes its
internals breaks one module. None of them syncs."""

from __future__ import annotations

import torch


def enabled(scaler) -> bool:
    """A scaler that scales: not None, and ``is_enabled()`` (a disabled GradScaler does nothing)."""
    return scaler is not None and bool(getattr(scaler, "is_enabled", lambda: False)())


def optimizer_state(scaler, optimizer, *, create: bool = False) -> dict | None:
    """GradScaler's state for ``optimizer`` in this step (``stage``, ``found_inf_per_device``), kept from
    ``unscale_``/``step`` until ``update()``. ``create``: make it as GradScaler itself does on first use
    (READY), so that ``unscale_`` fills the dict returned; otherwise None when there is none."""
    states = getattr(scaler, "_per_optimizer_states", None)
    if states is None:
        return None
    return states[id(optimizer)] if create else states.get(id(optimizer))


def in_step(scaler) -> bool:
    """Whether some optimizer is between ``unscale_``/``step`` and ``update()``."""
    return bool(getattr(scaler, "_per_optimizer_states", None))


def unscaled(scaler, optimizer) -> bool:
    """Whether ``optimizer``'s gradients were unscaled already in this step."""
    state = optimizer_state(scaler, optimizer)
    stage = state.get("stage") if state is not None else None
    return getattr(stage, "name", "") == "UNSCALED"


def found_inf(scaler, optimizer) -> list[torch.Tensor]:
    """The per-device found_inf tensors of ``optimizer``'s step (device tensors)."""
    try:
        per_device = scaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"]
    except (AttributeError, KeyError) as exc:  # pragma: no cover - a torch that changed its internals
        raise RuntimeError(
            "cannot read GradScaler's found_inf for a fused optimizer in this torch version; "
            "use a for-loop or foreach optimizer (fused=False) with ampkit, and report the torch version"
        ) from exc
    return list(per_device.values())


def scale_tensor(scaler) -> torch.Tensor | None:
    """The current scale as GradScaler's device tensor (shape ``[1]``); None when no enabled scaler
    holds one (disabled, or before the first ``scale()`` created it)."""
    return getattr(scaler, "_scale", None) if enabled(scaler) else None


def initial_scale(scaler) -> float:
    """The scale GradScaler starts from (``init_scale``), what it uses before creating its tensor."""
    return float(getattr(scaler, "_init_scale", 1.0))
