"""Opt-in for the engine: which module produced the first inf/NaN of an overflowing step.

Nothing is installed unless asked for (zero cost when off). Installed, it adds one
``isfinite().all()`` reduction per module output in forward and per gradient in backward, kept
on the device; the flags are read (a host-device sync) only after a step that was skipped.

It keeps nothing from one step to the next: :meth:`OverflowLocator.reset` (called by the engine
after every step) drops the flags, the recorder's per-step records and any hook left on a leaf
tensor, and forwards run without autograd (evaluation) are not recorded at all.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .hooks import Recorder, origin_backward


class OverflowLocator:
    def __init__(self, model: nn.Module):
        self._fwd: list = []     # (key, flag tensor) in forward completion order
        self._bwd: list = []     # (key, kind, tensor id, flag tensor) in backward order
        # no grad targets: the locator must not keep module outputs alive past their backward
        self._rec = Recorder(model, self._on_forward, self._on_grad, keep_grad_targets=False)
        self._rec.__enter__()

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
                    return {"name": key[0], "phase": "forward"}
        if self._bwd:
            flags = torch.stack([e[3] for e in self._bwd]).tolist()
            events = [(k, kind, tid, bad) for (k, kind, tid, _), bad in zip(self._bwd, flags)]
            return origin_backward(events, self._rec.depth, {})
        return None

    def reset(self) -> None:
        self._fwd.clear()
        self._bwd.clear()
        self._rec.reset()  # call records, tensor tokens, grad targets, hooks on leaf tensors

    def remove(self) -> None:
        self._rec.__exit__(None, None, None)
