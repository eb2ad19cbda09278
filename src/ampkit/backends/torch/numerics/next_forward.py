"""The trainer callbacks' op-level look where they could not replay the failing step (a GPU run that
reads the device only at the logging cadence: :mod:`..integrations.watch`): after the first
failure, the next training forward runs under :class:`.origin.OpTrace`.

Until a failure nothing of this is installed (the callbacks' overhead is their module-output
hooks alone). Armed, it adds one pre- and one post-hook per module; the first module entered in a
training forward starts a trace, its return ends it. A trace that finds the first op making an
inf/NaN that reaches ``recipient`` (the module the record saw fail first) hands ``{"name", "phase", "op",
"in_reference", ...}`` to ``found`` and removes everything;
a finite forward (the failure did not recur) is tried again, ``tries`` times at most, then
``found(None)``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn

from .hooks import float_tensors
from .origin import OpTrace


class NextForwardTrace:
    def __init__(self, model: nn.Module, found: Callable[[dict | None], None], tries: int = 4,
                 recipient: str | None = None):
        self.model, self.found, self.tries, self.recipient = model, found, tries, recipient
        self._trace: OpTrace | None = None
        self._entry: nn.Module | None = None
        self._handles = []
        for name, m in model.named_modules():
            self._handles.append(m.register_forward_pre_hook(self._pre(name)))
            self._handles.append(m.register_forward_hook(self._post(), always_call=True))

    def _pre(self, name: str):
        def hook(module, args):
            if self._trace is not None or not module.training or not torch.is_grad_enabled():
                return
            trace = OpTrace(self.model)
            trace.__enter__()
            trace.begin(name, float_tensors(args))
            self._trace, self._entry = trace, module
        return hook

    def _post(self):
        def hook(module, args, output):
            if self._trace is None or module is not self._entry:
                return
            trace, self._trace, self._entry = self._trace, None, None
            trace.__exit__(None, None, None)
            self.tries -= 1
            origin = trace.result(self.recipient)
            if origin is not None or self.tries <= 0:
                self.remove()
                self.found(origin)
        return hook

    @property
    def armed(self) -> bool:
        return bool(self._handles)

    def remove(self) -> None:
        if self._trace is not None:
            self._trace.__exit__(None, None, None)
            self._trace = None
        for h in self._handles:
            h.remove()
        self._handles = []
