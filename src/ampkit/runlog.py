"""A training run's record for ``ampkit parity --runs``: the mode and seed it trained with, its
per-step training loss and step times, and its evaluation metrics as the loop logs them."""

from __future__ import annotations

import json
import math
import time

from ._version import __version__

KIND = "run"


def _num(value) -> float:
    """A float from a Python number, a 0-d tensor or array (``.item()``)."""
    if hasattr(value, "item"):
        value = value.item()
    value = float(value)
    return value if math.isfinite(value) else float("nan")


class RunLog:
    """What one training run did, step by step; :meth:`save` writes its document."""

    def __init__(self, path: str | None, *, mode: str, seed: int, model: str | None = None, data: str | None = None,
                 framework: str | None = None, clock=time.perf_counter):
        from .errors import UsageError

        if isinstance(seed, bool) or not isinstance(seed, int):
            raise UsageError(f"record(seed=...) must be an integer (the run's seed); received {seed!r}")
        self.path, self.mode, self.seed, self.model, self.data, self.framework = path, mode, seed, model, data, framework
        self.loss: list[float] = []
        self.step_s: list[float] = []
        self.evals: list[dict] = []
        self.skipped_steps = 0
        self._clock = clock
        self._last = clock()
        self._t0 = self._last

    def step(self, loss, *, skipped: bool = False) -> None:
        """One optimizer step done: its training loss (read on the host: one sync per step) and its time since the last."""
        now = self._clock()
        self.loss.append(_num(loss))
        self.step_s.append(now - self._last)
        self._last = now
        self.skipped_steps += bool(skipped)

    def evaluate(self, **metrics) -> None:
        """Evaluation metrics at this point of the run (``accuracy=0.91, loss=0.3``); the last ones
        are what ``parity --runs`` compares."""
        self.evals.append({"step": len(self.loss), **{k: _num(v) for k, v in metrics.items()}})
        self._last = self._clock()  # an evaluation is not a training step's time

    def to_dict(self) -> dict:
        def clean(xs):
            return [None if math.isnan(x) else x for x in xs]

        return {"ampkit_version": __version__, "command": KIND, "environment": {}, "mode": self.mode,
                "seed": self.seed, "model": self.model, "data": self.data, "framework": self.framework,
                "steps": len(self.loss), "loss": clean(self.loss), "step_s": self.step_s,
                "eval": [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in e.items()}
                         for e in self.evals],
                "skipped_steps": self.skipped_steps, "seconds": self._clock() - self._t0}

    def save(self, path: str | None = None) -> str:
        from .errors import UsageError
        from .outputs import write_text

        target = path or self.path
        if not target:
            raise UsageError("RunLog.save() needs a path (record(path, ...) or save(path))")
        write_text(target, json.dumps(self.to_dict(), indent=1) + "\n")
        return target

    def __enter__(self) -> RunLog:
        return self

    def __exit__(self, *exc) -> None:
        if self.path:
            self.save()


class RunTrace:
    """What a trainer callback gathers for the run record it adds to its document (``"run"``): a
    loss where the trainer already has it on the host (its logging steps), every step's end time,
    the evaluation metrics as the trainer logs them. No device read of its own beyond those."""

    def __init__(self, clock=time.perf_counter):
        self._clock = clock
        self.times = [clock()]
        self.loss: list[float] = []
        self.loss_steps: list[int] = []
        self.evals: list[dict] = []

    def step_end(self) -> None:
        self.times.append(self._clock())

    def loss_at(self, step: int, loss) -> None:
        self.loss.append(_num(loss))
        self.loss_steps.append(int(step))

    def evaluate(self, step: int, metrics: dict) -> None:
        row = {k: _num(v) for k, v in metrics.items() if _is_number(v)}
        if row:
            self.evals.append({"step": int(step), **row})

    def run(self, *, mode: str, seed: int | None, model: str | None, steps: int, skipped: int, framework: str) -> dict:
        """The run record (``seed`` None: not known -- ``parity --runs`` then asks for it)."""
        def clean(xs):
            return [None if isinstance(x, float) and math.isnan(x) else x for x in xs]

        return {"mode": mode, "seed": None if seed is None else int(seed), "model": model, "data": None, "framework": framework,
                "steps": int(steps), "loss": clean(self.loss), "loss_steps": list(self.loss_steps),
                "step_s": [b - a for a, b in zip(self.times, self.times[1:])],
                "eval": [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in e.items()}
                         for e in self.evals],
                "skipped_steps": int(skipped), "seconds": self.times[-1] - self.times[0]}


def _is_number(v) -> bool:
    if hasattr(v, "numel"):
        return v.numel() == 1
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def model_name(model) -> str | None:
    """A model's class and parameter count: runs of another model (or size) are not compared."""
    if model is None:
        return None
    try:
        size = sum(int(p.numel()) for p in model.parameters())
    except Exception:  # noqa: BLE001 - a name is information, not a check
        try:
            size = int(model.count_params())  # Keras
        except Exception:  # noqa: BLE001
            return type(model).__name__
    return f"{type(model).__name__} ({size:,} parameters)"
