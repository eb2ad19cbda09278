"""``--what-if`` inside modules: the tensors a module's own code computes, and what autocast holds in float32.

Module hooks see module outputs only, so an attention module's scores (``q @ k.transpose(-2, -1)``
in its own forward, between its child layers) were no module's output and an overflow there was
never predicted. :class:`InnerOps` (a :class:`torch.overrides.TorchFunctionMode` over the what-if's
float32 forward) hands each tensor that an op of :data:`INNER_OPS` computes in a module's own code
to the step's probe, under the innermost module running.

Which of those tensors a low-precision run would hold in float16/bfloat16 is not guessed from a
list: :func:`autocast_dtypes` runs the forward once under fp16 autocast (no gradients, buffers put
back) and records, per module, whether its outputs are low precision and, per (module, op), whether
that op's outputs are. autocast keeps softmax, log_softmax, layer_norm, exp, sum ... in float32,
and type promotion makes a float16 tensor times a float32 parameter float32 (timm's ConvNeXt layer
scale, so its ``drop_path`` outputs): those are not judged against fp16's range, as the real audit
does not judge them (``LayerStats.in_format``). Cost: one no-grad forward, once per what-if.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode

from .numerics.hooks import ModuleHooks, float_tensors
from .numerics.origin import op_name
from .numerics.replay import restore, snapshot
from .whatif_softmax import OPS as SOFTMAX_OPS
from .whatif_softmax import format_errors

#: ops whose outputs are summarized when a module's own code runs them (module outputs are summarized
#: anyway): matmuls, attention, reductions, exp/pow, elementwise sums and scalings, functional activations
INNER_OPS = frozenset({
    "matmul", "bmm", "mm", "einsum", "baddbmm", "addmm", "addbmm", "scaled_dot_product_attention",
    "sum", "cumsum", "mean", "exp", "pow", "square", "softmax", "log_softmax", "add", "sub", "mul", "div",
    "add_", "sub_", "mul_", "div_", "gelu", "silu", "relu", "tanh", "sigmoid", "softplus"})
LOW = (torch.float16, torch.bfloat16)


class _ModuleStack(ModuleHooks, TorchFunctionMode):
    """The innermost module running, for each torch function call of a forward."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.stack: list[str] = []
        self.busy = False
        self._handles: list = []
        # a torch.nn leaf (Linear, Conv, LayerNorm...) computes its output and nothing of its own beyond it
        self._builtin = {n for n, m in model.named_modules()
                         if not any(True for _ in m.children()) and type(m).__module__.startswith("torch.nn")}

    def _pre(self, name):
        def hook(module, args):
            self.stack.append(name)
        return hook

    def _post(self, name):
        def hook(module, args, output):
            if self.stack:
                self.stack.pop()
            self.busy = True
            try:
                self.on_output(name, output)
            finally:
                self.busy = False
        return hook

    def on_output(self, name: str, output) -> None:
        pass

    def on_op(self, module: str, op: str, tensors: list) -> None:
        pass

    def on_call(self, module: str, op: str, args, kwargs) -> None:
        """Every op of :data:`~.whatif_softmax.OPS` the module's own code calls, with its arguments."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.busy or not self.stack or self.stack[-1] in self._builtin:
            return out
        op = op_name(func)
        if op in SOFTMAX_OPS:
            self.busy = True
            try:
                self.on_call(self.stack[-1], op, args, kwargs)
            finally:
                self.busy = False
        if op in INNER_OPS and isinstance(out, (torch.Tensor, tuple, list)):
            tensors = [t for t in float_tensors(out) if t.numel()]
            if tensors:
                self.busy = True
                try:
                    self.on_op(self.stack[-1], op, tensors)
                finally:
                    self.busy = False
        return out


class InnerOps(_ModuleStack):
    """``add(module, op, tensor)`` for each tensor an :data:`INNER_OPS` op computes in a module's own
    code that autocast holds in the low format (``low``: from :func:`autocast_dtypes`; unknown: held)."""

    def __init__(self, model: nn.Module, add, low_ops: dict | None, amplified=None):
        super().__init__(model)
        self.add, self.low_ops = add, low_ops or {}
        self.amplified = amplified  # (module, op, {format: error}) for each softmax its code calls (.whatif_softmax)

    def on_call(self, module, op, args, kwargs):
        if self.amplified is not None and torch.is_grad_enabled():
            errors = format_errors(op, args, kwargs)
            if errors:
                self.amplified(module, op, errors)

    def on_op(self, module, op, tensors):
        if self.low_ops.get((module, op), True):
            for t in tensors:
                self.add(module, op, t)


class _Dtypes(_ModuleStack):
    def __init__(self, model):
        super().__init__(model)
        self.modules: dict[str, bool] = {}
        self.ops: dict[tuple[str, str], bool] = {}

    def on_output(self, name, output):
        ts = float_tensors(output)
        if ts:
            self.modules[name] = self.modules.get(name, False) or any(t.dtype in LOW for t in ts)

    def on_op(self, module, op, tensors):
        key = (module, op)
        self.ops[key] = self.ops.get(key, False) or any(t.dtype in LOW for t in tensors)


def autocast_dtypes(model: nn.Module, forward) -> tuple[dict[str, bool], dict[tuple[str, str], bool]] | None:
    """``forward()`` (the caller's: under fp16 autocast, the step's random numbers) once without
    gradients: per module whether its outputs are low precision, per (module, op) likewise; the
    buffers it updates are put back. None when that forward raises (nothing known: all held)."""
    saved = snapshot(model)
    probe = _Dtypes(model)
    try:
        with torch.no_grad(), probe:
            forward()
    except Exception:
        return None
    finally:
        restore(saved)
    return probe.modules, probe.ops
