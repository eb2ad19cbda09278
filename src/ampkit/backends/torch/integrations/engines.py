"""The loss scaler of a training engine, as the trainer callbacks read it."""

from __future__ import annotations

__all__ = ["HostScale", "scaler_of", "unreadable_scale_line"]


class HostScale:
    """A loss scale read from a host attribute (``owner.<attr>``) at each step."""

    _scale = None

    def __init__(self, owner, attr: str = "cur_scale") -> None:
        self.owner, self.attr = owner, attr

    def is_enabled(self) -> bool:
        return True

    @property
    def _init_scale(self) -> float:
        return float(getattr(self.owner, self.attr))


def _deepspeed_scale_owner(opt):
    for obj in (opt, getattr(opt, "optimizer", None)):
        if obj is None:
            continue
        ls = getattr(obj, "loss_scaler", None)
        if ls is not None and isinstance(getattr(ls, "cur_scale", None), (int, float)):
            return ls
        if isinstance(getattr(obj, "cur_scale", None), (int, float)) and not isinstance(obj, type):
            return obj
    return None


def scaler_of(optimizer):
    """The scaler the watch reads: the optimizer's GradScaler, a DeepSpeed scale, or None."""
    scaler = getattr(optimizer, "scaler", None)
    if scaler is not None:
        return scaler
    owner = _deepspeed_scale_owner(optimizer)
    return HostScale(owner) if owner is not None else None


def _engine(optimizer) -> str | None:
    for obj in (optimizer, getattr(optimizer, "optimizer", None)):
        mod = type(obj).__module__ if obj is not None else ""
        if "deepspeed" in mod.lower() or "DeepSpeed" in type(obj).__name__:
            return "DeepSpeed"
    return None


def unreadable_scale_line(optimizer, scaler, *, declared: str, source: str) -> str | None:
    """One line when an engine scales the loss where the callback cannot read it (None otherwise)."""
    engine = _engine(optimizer)
    if scaler is not None or (engine is None and declared != "fp16"):
        return None
    if engine is None:   # fp16 declared, no scaler: the precision check says what runs
        return None
    return (f"{source}: the loss scale of {engine} ({type(getattr(optimizer, 'optimizer', optimizer)).__name__}) is "
            f"not visible to the callback (no GradScaler, no loss_scaler.cur_scale): the ledger has no loss scale "
            f"and counts no skipped steps; still watched: each module's output amax, the gradient norms, the "
            f"loss, the first inf/NaN and the LR scheduler")
