"""The optimizers an engine has stepped, followed by identity (weak references), never by ``id()``."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence

import torch

__all__ = ["Followers"]


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


class Followers:
    """The records of every optimizer seen, by identity; an entry dies with its optimizer.

    Args:
        hook: put a step post-hook on for-loop/foreach optimizers (loss scaling needs to learn
            whether GradScaler let them step).
    """

    __slots__ = ("_known", "_last", "_hook", "__weakref__")

    def __init__(self, hook: bool) -> None:
        self._known: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._hook = hook
        #: (weak reference to the last single optimizer, its records): the usual case, found fast
        self._last: tuple | None = None
        weakref.finalize(self, _unfollow_all, self._known)  # the engine gone: no hook left behind

    def records(self, opts: Sequence[torch.optim.Optimizer], check: Callable) -> list[_Followed]:
        """The records of ``opts``, made on first sight after ``check(params)`` (master weights, once)."""
        last = self._last
        if last is not None and len(opts) == 1 and last[0]() is opts[0]:
            return last[1]
        known = self._known
        followed = [known.get(opt) or self._follow(opt, check) for opt in opts]
        self._last = (weakref.ref(opts[0]), followed) if len(opts) == 1 else None
        return followed

    def _follow(self, opt: torch.optim.Optimizer, check: Callable) -> _Followed:
        check(p for g in opt.param_groups for p in g["params"])
        followed = self._known[opt] = _Followed(opt, self._hook)
        return followed
