"""Per-module recording of forward outputs and gradients, for the audit and the overflow locator.

Forward: pre- and post-hooks on every module. Backward: tensor hooks on each module's floating
inputs and outputs (not ``register_full_backward_hook``, which breaks on in-place ops such as
``ReLU(inplace=True)``). Statistics stay on the device until :meth:`Recorder.collect`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn


def tensors_in(obj: Any, out: list | None = None, *, floating: bool = False) -> list[torch.Tensor]:
    """The tensors inside a module output or a batch (tensor, tuple, list, dict, ModelOutput), in
    order; ``floating``: floating-point ones only."""
    out = [] if out is None else out
    if isinstance(obj, torch.Tensor):
        if not floating or obj.is_floating_point():
            out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            tensors_in(v, out, floating=floating)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            tensors_in(v, out, floating=floating)
    elif hasattr(obj, "to_tuple"):
        tensors_in(obj.to_tuple(), out, floating=floating)
    return out


def float_tensors(obj: Any, out: list | None = None) -> list[torch.Tensor]:
    """Floating-point tensors inside a module output (tensor, tuple, list, dict, ModelOutput)."""
    return tensors_in(obj, out, floating=True)


class ModuleHooks:
    """Mixin for a ``TorchFunctionMode`` that follows which module runs: on enter, a pre- and a post-forward
    hook (``self._pre(name)``, ``self._post(name)``; the post hook runs even when the forward raises) on
    every module of ``self.model``, kept in ``self._handles`` and removed on exit. ``hook_kwargs``: the
    hooks take the forward's keyword arguments too."""

    hook_kwargs = False

    def __enter__(self):
        kw = {"with_kwargs": True} if self.hook_kwargs else {}
        for name, m in self.model.named_modules():
            self._handles.append(m.register_forward_pre_hook(self._pre(name), **kw))
            self._handles.append(m.register_forward_hook(self._post(name), always_call=True, **kw))
        return super().__enter__()

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles.clear()
        return super().__exit__(*exc)


class Recorder:
    """Calls ``on_forward(key, tensors)`` and ``on_grad(key, kind, grad, tensor_id)`` per module call.

    ``key`` is ``(module name, call index)``. ``kind`` is "output" (gradient w.r.t. the module's
    output) or "input" (gradient w.r.t. its input, i.e. what the module's backward produced).
    ``self.order`` lists keys in forward completion order; ``self.backward_events`` lists
    ``tensor_id`` identifies the forward tensor the gradient belongs to (the same tensor is one
    module's output and the next module's input).
    """

    def __init__(self, model: nn.Module, on_forward: Callable, on_grad: Callable, *, grad_inputs: bool = True,
                 keep_grad_targets: bool = True):
        self.model = model
        self.on_forward = on_forward
        self.on_grad = on_grad
        self.grad_inputs = grad_inputs
        self.keep_grad_targets = keep_grad_targets
        self.order: list[tuple[str, int]] = []
        self.calls: dict[str, int] = {}
        self.depth = {name: (name.count(".") + 1 if name else 0) for name, _ in model.named_modules()}
        self.types = {name: type(m).__name__ for name, m in model.named_modules()}
        self.leaf = {name: not any(True for _ in m.children()) for name, m in model.named_modules()}
        self._handles: list = []
        self._stack: list[tuple[str, int]] = []
        self._tids: dict = {}
        self._next_tid = 0
        # hooks on leaf tensors (a parameter or a user tensor passed to a module): unlike hooks on
        # intermediate outputs they outlive the step, so they are removed at reset()/exit
        self._leaf_handles: list = []
        #: floating outputs that require grad, in forward order (for autograd.grad on them alone)
        self.grad_targets: list[torch.Tensor] = []

    def _tid(self, t: torch.Tensor) -> int:
        """A token for a forward tensor: the same for the same live tensor (one module's output is
        the next one's input), never shared by two tensors — unlike id(), which Python reuses
        once a module output is freed."""
        seen = self._tids.get(id(t))
        if seen is not None and seen[0]() is t:
            return seen[1]
        self._next_tid += 1
        self._tids[id(t)] = (weakref.ref(t), self._next_tid)
        return self._next_tid

    def __enter__(self) -> Recorder:
        for name, module in self.model.named_modules():
            self._handles.append(module.register_forward_pre_hook(self._pre(name)))
            self._handles.append(module.register_forward_hook(self._post(name)))
        return self

    def __exit__(self, *exc) -> bool:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._remove_leaf_hooks()  # the records stay readable after the block
        return False

    def _remove_leaf_hooks(self) -> None:
        for h in self._leaf_handles:
            h.remove()
        self._leaf_handles.clear()

    def reset(self) -> None:
        """Forget this step: call records, tensor tokens, grad targets, hooks left on leaf tensors."""
        self._remove_leaf_hooks()
        self.calls.clear()
        self.order.clear()
        self._stack.clear()
        self._tids.clear()
        self.grad_targets.clear()

    def _hook_tensor(self, t: torch.Tensor, key, kind) -> None:
        handle = t.register_hook(self._grad_hook(key, kind, self._tid(t)))
        if t.grad_fn is None:
            self._leaf_handles.append(handle)

    def _pre(self, name: str):
        def hook(module, args):
            idx = self.calls.get(name, 0)
            self.calls[name] = idx + 1
            key = (name, idx)
            self._stack.append(key)
            if self.grad_inputs and torch.is_grad_enabled():
                for t in float_tensors(args):
                    if t.requires_grad:
                        self._hook_tensor(t, key, "input")
        return hook

    def _post(self, name: str):
        def hook(module, args, output):
            key = self._stack.pop() if self._stack else (name, 0)
            self.order.append(key)
            tensors = float_tensors(output)
            self.on_forward(key, tensors)
            if torch.is_grad_enabled():
                for t in tensors:
                    if t.requires_grad:
                        self._hook_tensor(t, key, "output")
                        if self.keep_grad_targets:
                            self.grad_targets.append(t)
        return hook

    def _grad_hook(self, key, kind, tid):
        def hook(grad):
            self.on_grad(key, kind, grad, tid)
        return hook


def origin_backward(events: list, depth: dict, order_index: dict) -> dict | None:
    """The module whose backward first produced a non-finite gradient."""
    first = next((e for e in events if e[3]), None)
    if first is None:
        return None
    tid = first[2]
    consumers = [k for k, kind, t, _ in events if t == tid and kind == "input"]
    producers = [k for k, kind, t, _ in events if t == tid and kind == "output"]
    pool = consumers or producers or [first[0]]
    key = max(pool, key=lambda k: (depth.get(k[0], 0), order_index.get(k, 0)))
    return {"name": key[0], "phase": "backward"}
