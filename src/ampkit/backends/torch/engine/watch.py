"""What the precision contract check (:mod:`.contract`) learns from a real training step, for free."""

from __future__ import annotations

import sys
import weakref

import torch

__all__ = ["ContractWatch", "LayerSeen", "is_matmul_layer", "fsdp_units", "watch_layers"]

LOW = (torch.float16, torch.bfloat16)


def is_matmul_layer(module: torch.nn.Module) -> bool:
    """A layer whose forward is a matmul or a convolution that autocast covers."""
    from torch.nn.modules.conv import _ConvNd

    return isinstance(module, (torch.nn.Linear, _ConvNd)) or type(module).__name__ == "Conv1D"


class LayerSeen:
    """One layer in the recorded forward: the output dtype, autocast on/off and its dtype, the weight's
    dtype, and whether autocast was on when the model's forward began (``entry``: False when it was
    off there, so an off layer is autocast not active at all, not a region the model turns off)."""

    __slots__ = ("kind", "output", "autocast", "autocast_dtype", "weight", "entry")

    def __init__(self, module, output, entry: bool | None = None, weight: torch.dtype | None = None) -> None:
        self.entry = entry
        self.kind = kind_of(module)
        out = output[0] if isinstance(output, (tuple, list)) and output else output
        self.output = out.dtype if isinstance(out, torch.Tensor) else None
        device = out.device.type if isinstance(out, torch.Tensor) else "cpu"
        self.autocast = torch.is_autocast_enabled(device)
        self.autocast_dtype = torch.get_autocast_dtype(device) if self.autocast else None
        self.weight = weight


def kind_of(module: torch.nn.Module) -> str:
    """The class name a user wrote (FSDP2 renames a sharded ``Linear`` to ``FSDPLinear``)."""
    cls = type(module)
    name = cls.__name__
    if name.startswith("FSDP") and len(cls.__bases__) > 1:
        return cls.__bases__[-1].__name__
    return name


def _weight_dtype(module) -> torch.dtype | None:
    weight = getattr(module, "weight", None)
    return weight.dtype if isinstance(weight, torch.Tensor) else None


def fsdp_units(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module, object]]:
    """(name, module, its FSDP2 param group) for every FSDP2 unit of ``model`` that holds parameters.
    Empty where FSDP was never imported: no model can be sharded by it then, and importing it costs
    seconds (torch.distributed.tensor, sympy) on a first step that needs none of it."""
    if "torch.distributed.fsdp" not in sys.modules:
        return []
    try:
        from torch.distributed.fsdp import FSDPModule
    except Exception:  # pragma: no cover - torch without distributed
        return []
    out = []
    for name, module in model.named_modules():
        if isinstance(module, FSDPModule):
            group = getattr(module._get_fsdp_state(), "_fsdp_param_group", None)
            if group is not None:
                out.append((name, module, group))
    return out


def reduce_dtype_of(policy) -> torch.dtype | None:
    """The dtype an FSDP2 policy reduces gradients in (its reduce_dtype, else its param_dtype)."""
    return policy.reduce_dtype or policy.param_dtype


def local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


class ContractWatch:
    """The one-shot recorder of a model's first forward and first step after arming."""

    __slots__ = ("_model", "_handles", "layers", "grads", "unfit", "armed", "__weakref__")

    def __init__(self) -> None:
        self._model = None
        self._handles: list = []
        self.layers: dict[str, LayerSeen] = {}
        self.grads: dict[int, torch.dtype] | None = None   # id(param) -> grad dtype, at the first step
        self.unfit: dict[str, torch.Tensor] = {}            # FSDP unit name -> device flag
        self.armed = False  # True from a recorded forward until the next step records the gradients

    def watches(self, model) -> bool:
        return self._model is not None and self._model() is model

    def arm(self, model: torch.nn.Module) -> None:
        """Record the next forward of ``model`` (and the step after it); forget what was recorded."""
        self.disarm()
        self._model = weakref.ref(model)
        self.layers, self.grads, self.unfit = {}, None, {}
        if hasattr(model, "_orig_mod"):  # torch.compile'd: hooks removed after one forward would recompile it
            return
        self._handles = watch_layers(model, self.layers)
        self._handles.append(model.register_forward_hook(self._forward_done))

    def _forward_done(self, module, args, output) -> None:
        if torch.compiler.is_compiling():  # traced by torch.compile: removing hooks there is a graph break
            return
        self._remove_hooks()
        self.armed = True

    def _remove_hooks(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def disarm(self) -> None:
        self._remove_hooks()
        self.armed = False

    def at_step(self, opts) -> None:
        """The first step after the recorded forward: the gradients the optimizers are about to use."""
        self.armed = False
        self.grads = {id(p): p.grad.dtype for opt in opts for g in opt.param_groups for p in g["params"]
                      if p.grad is not None}
        model = self._model() if self._model is not None else None
        if model is not None:
            self.unfit = unfit_gradients(model)


def watch_layers(model: torch.nn.Module, layers: dict) -> list:
    """Forward hooks that fill ``layers`` with a :class:`LayerSeen` per matmul/conv layer (its first
    call), each knowing whether autocast was on when the model's forward began; the handles."""
    entry: list = [None]

    def at_entry(module, args):
        if torch.compiler.is_compiling():  # inside a compiled model: record nothing (no graph break)
            return
        device = next((a.device.type for a in args if isinstance(a, torch.Tensor)), None) or \
            next((p.device.type for p in module.parameters()), "cpu")
        entry[0] = torch.is_autocast_enabled(device)

    weights: dict = {}

    def weight_seen(name):  # before the forward: under FSDP2 the unsharded weight, in param_dtype
        def pre(module, args):
            if torch.compiler.is_compiling():
                return
            weights.setdefault(name, _weight_dtype(module))
        return pre

    def recorder(name):
        def hook(module, args, output):
            if torch.compiler.is_compiling():
                return
            if name not in layers:  # the first call of a layer used twice
                layers[name] = LayerSeen(module, output, entry[0], weights.get(name))
        return hook

    handles = [model.register_forward_pre_hook(at_entry)]
    for name, module in model.named_modules():
        if is_matmul_layer(module):
            handles.append(module.register_forward_pre_hook(weight_seen(name or "model")))
            handles.append(module.register_forward_hook(recorder(name or "model")))
    return handles


def intended_policy(units, index: int):
    """The policy a unit is meant to follow: its own when it was given one, else the root's (FSDP2
    applies a policy only to the parameters of the module it was given: a unit sharded without one
    silently keeps float32)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    own = units[index][2].mp_policy
    if own != MixedPrecisionPolicy() or not units:
        return own, False
    root = units[0][2].mp_policy  # named_modules() lists the outermost unit first
    return root, root != own


def unfit_gradients(model) -> dict[str, torch.Tensor]:
    """Per FSDP2 unit meant to reduce in float16/bfloat16: a device flag, True when its gradients hold
    values that dtype cannot (so the reduction did not run in it). No host-device sync."""
    units = fsdp_units(model)
    out = {}
    for i, (name, _, group) in enumerate(units):
        policy, _ = intended_policy(units, i)
        rd = reduce_dtype_of(policy)
        if rd not in LOW:
            continue
        flags = [(lambda g: (g.to(rd).to(g.dtype) != g).any())(local(fp.sharded_param.grad))
                 for fp in group.fsdp_params if fp.sharded_param.grad is not None]
        if flags:
            out[name] = torch.stack(flags).any()
    return out
