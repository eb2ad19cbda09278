"""Parameter gradients of one audited step: what ``GradScaler.unscale_`` checks before the optimizer.

A weight gradient is a sum over the batch (``x.T @ grad_out`` of a Linear): it can leave fp16's
range while every activation and every gradient w.r.t. a module's output is finite. Under autocast
it is computed in the mode's dtype (the matmul of the fp16 copies of the weight's inputs) and then
cast to the parameter's float32 ``.grad``; an inf made there stays inf. So:

* the float32 reference takes the true parameter gradients along with the output gradients (one
  ``autograd.grad`` call): their amax per parameter is what ``amax * loss_scale`` is judged by;
* the audited pass's ``.grad`` (scaled, before any unscale) is checked for inf/NaN exactly as
  ``GradScaler.unscale_`` checks it: any non-finite parameter gradient is a skipped step.

Both are reduced on the device and read in one transfer per pass (one host-device sync).
"""

from __future__ import annotations

import torch
import torch.nn as nn


def owner_of(param_name: str) -> str:
    """The module that holds a parameter (``"fc.weight"`` -> ``"fc"``; the root's own -> ``""``)."""
    return param_name.rpartition(".")[0]


class ParamGrads:
    """The trainable parameters of ``model`` by qualified name (tied weights once, under the first name)."""

    def __init__(self, model: nn.Module):
        self.named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]

    @property
    def tensors(self) -> list[torch.Tensor]:
        return [p for _, p in self.named]

    def reference(self, grads) -> dict[str, float]:
        """``{name: amax}`` of the true (float32 reference) gradients ``grads`` (None: unused)."""
        pairs = [(n, g) for (n, _), g in zip(self.named, grads) if g is not None]
        if not pairs:
            return {}
        amax = torch.stack([g.detach().abs().max().float() if g.numel() else g.new_zeros((), dtype=torch.float32)
                            for _, g in pairs]).tolist()  # one transfer to the host
        return {n: a for (n, _), a in zip(pairs, amax)}

    def nonfinite(self) -> dict[str, int]:
        """``{name: count}`` of inf/NaN in each ``.grad`` as the audited backward left it (scaled),
        only the parameters that have any: what makes GradScaler skip the step."""
        pairs = [(n, p.grad) for n, p in self.named if p.grad is not None]
        if not pairs:
            return {}
        counts = torch.stack([(g.numel() - torch.isfinite(g).sum()) for _, g in pairs]).tolist()  # one transfer
        return {n: int(c) for (n, _), c in zip(pairs, counts) if c}


def holder(layers: dict, param: str):
    """The entry (report layer, what-if summary) of the module holding ``param``, or of its nearest
    ancestor that ran, from ``layers`` keyed by module name."""
    name = owner_of(param)
    while name not in layers and name:
        name = owner_of(name)
    return layers.get(name)


def param_origin(bad: dict[str, int]) -> dict:
    """``first_nonfinite`` for a step whose only inf/NaN is in parameter gradients: the module holding
    the first such parameter (in ``named_parameters`` order), the parameter named."""
    param = next(iter(bad))
    return {"name": owner_of(param), "phase": "backward", "param": param}


def add_param_stats(layers: dict, amax: dict[str, float], bad: dict[str, int], overflowed: dict[str, float],
                    scale: float) -> None:
    """Add one recorded step's parameter gradients to its holders' report layers: the reference amax,
    the audited pass's inf/NaN count at ``scale``, and every parameter whose gradient was inf/NaN in
    any measured pass so far (``overflowed``: name -> the largest such scale)."""
    for param, a in amax.items():
        lay = holder(layers, param)
        if lay is not None:
            lay.param_grad_amax = max(lay.param_grad_amax or 0.0, a)
    for param, n in bad.items():
        lay = holder(layers, param)
        if lay is not None:
            lay.param_grad_nonfinite += n
    for param, at in overflowed.items():
        lay = holder(layers, param)
        if lay is None:
            continue
        entry = lay.param_grad_overflow or {"params": [], "loss_scale": at}
        if param not in entry["params"]:
            entry["params"].append(param)
        entry["loss_scale"] = max(entry["loss_scale"], at)
        lay.param_grad_overflow = entry
