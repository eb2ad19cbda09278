"""Opt-in for the engine: which module produced the first inf/NaN of an overflowing step.

Nothing is installed unless asked for (zero cost when off). Installed, it adds one
``isfinite().all()`` reduction per module output in forward and per gradient in backward, kept
on the device; the flags are read (a host-device sync) only after a step that was skipped.

After a skipped step whose forward held the inf/NaN, the step's forward is replayed (its inputs,
autocast state and random-number state are held by reference until the step ends; buffers are
put back after the replay) under the op-level trace of :mod:`.origin`: the module whose own code
made the first inf/NaN is named (not the leaf that received it), with the op and ``in_reference``
(float32 fails there too). The trace costs a sync per op, once, after a failure only.

It keeps nothing from one step to the next: :meth:`OverflowLocator.reset` (called by the engine
after every step) drops the flags, the recorder's per-step records and any hook left on a leaf
tensor, and forwards run without autograd (evaluation) are not recorded at all.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .hooks import Recorder, origin_backward
from .origin import refine, trace_calls
from .replay import StepCalls


class OverflowLocator:
    def __init__(self, model: nn.Module):
        self._fwd: list = []     # (key, flag tensor) in forward completion order
        self._bwd: list = []     # (key, kind, tensor id, flag tensor) in backward order
        # no grad targets: the locator must not keep module outputs alive past their backward
        self._rec = Recorder(model, self._on_forward, self._on_grad, keep_grad_targets=False)
        self._rec.__enter__()
        self._model = model
        # this step's training forwards, held by reference until the step ends (the last few only)
        self._calls = StepCalls([model], training_only=False)

    def _traced(self) -> dict | None:
        """The op-level origin from a replay of this step's forwards."""
        trace = trace_calls(self._model, self._calls)
        return None if trace is None else trace.result()

    def _on_forward(self, key, tensors) -> None:
        if not torch.is_grad_enabled():  # evaluation: cannot feed this step's gradients
            return
        flags = [~torch.isfinite(t.detach()).all() for t in tensors]
        if flags:
            self._fwd.append((key, torch.stack(flags).any()))

    def _on_grad(self, key, kind, grad, tid) -> None:
        self._bwd.append((key, kind, tid, ~torch.isfinite(grad.detach()).all()))

    def locate(self) -> dict | None:
        """The first non-finite module output, forward then backward (reads the flags: a sync)."""
        if self._fwd:
            flags = torch.stack([f for _, f in self._fwd]).tolist()
            for (key, _), bad in zip(self._fwd, flags):
                if bad:
                    first = refine({"name": key[0], "phase": "forward"}, self._traced())
                    return {k: first[k] for k in ("name", "phase", "op", "in_reference", "received_by", "cause")
                            if k in first}
        if self._bwd:
            flags = torch.stack([e[3] for e in self._bwd]).tolist()
            events = [(k, kind, tid, bad) for (k, kind, tid, _), bad in zip(self._bwd, flags)]
            first = origin_backward(events, self._rec.depth, {})
            return None if first is None else {**first, "op": None, "in_reference": False}
        return None

    def reset(self) -> None:
        self._fwd.clear()
        self._bwd.clear()
        self._calls.clear()
        self._rec.reset()  # call records, tensor tokens, grad targets, hooks on leaf tensors

    def remove(self) -> None:
        self._rec.__exit__(None, None, None)
        self._calls.remove()
