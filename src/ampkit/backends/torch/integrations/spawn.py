"""Lightning ``ddp_spawn``: the callback's record back in the launching process."""

from __future__ import annotations

import functools
import json

__all__ = ["carry_through_spawn"]

_KEY = "ampkit_callbacks"


def _ours(trainer, cls) -> list:
    return [c for c in getattr(trainer, "callbacks", ()) if isinstance(c, cls)]


def carry_through_spawn(cls) -> None:
    """Wrap Lightning's multiprocessing launcher (once) for callbacks of class ``cls``."""
    try:
        from lightning.pytorch.strategies.launchers.multiprocessing import _MultiProcessingLauncher as Launcher
    except ImportError:   # another Lightning layout: ddp_spawn users read json_path
        return
    get, update = Launcher.get_extra_results, Launcher.update_main_process_results
    if getattr(get, "_ampkit", False):
        return

    @functools.wraps(get)
    def get_extra_results(self, trainer):
        extra = get(self, trainer)
        extra[_KEY] = json.dumps([{"summary": c.summary, "state": c.core.record.state() if c.core.record else None,
                                   "merged": c.core.merged} for c in _ours(trainer, cls)], default=str)
        return extra

    @functools.wraps(update)
    def update_main_process_results(self, trainer, extra):
        update(self, trainer, extra)
        carried = extra.get(_KEY) if isinstance(extra, dict) else None
        if carried:
            for cb, data in zip(_ours(trainer, cls), json.loads(carried)):
                cb._from_worker(data)

    get_extra_results._ampkit = True
    Launcher.get_extra_results = get_extra_results
    Launcher.update_main_process_results = update_main_process_results
