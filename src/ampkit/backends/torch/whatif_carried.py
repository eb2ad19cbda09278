"""``--what-if`` for bf16: the error a bf16 run carries from layer to layer, measured once (issue #50).

Float32 alone shows what a format does to each tensor it rounds, not what rounding early layers does
to later ones: on GPT-2 with q/k scaled x300 every tensor's bf16 rounding is small against its spread,
while the real bf16 run's attention output is 14% from float32's (a softmax over scores whose inputs
carry correlated errors from the weights' rounding). So the what-if runs the first step's forward
twice more without gradients -- float32 (kept: each leaf module's input and output) and under bf16
autocast (compared) -- with the step's random numbers, buffers put back: each leaf's output error and
the error it receives, which :func:`ampkit.audit.whatif_bf16.bf16_prediction` judges with the audit's own
rules (:func:`ampkit.audit.core.module_limit`, :func:`ampkit.audit.model_error.grown_inside_finding`).
Cost: two no-grad forwards once per what-if, and one forward's leaf inputs and outputs held in float32.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ...compare import relative_error
from ...formats import BF16
from .numerics.hooks import float_tensors
from .numerics.replay import restore, same_randomness, snapshot


def _err(xs, refs) -> float:
    worst = 0.0
    for x, r in zip(xs, refs):
        if x.shape == r.shape:
            dist = float(torch.linalg.vector_norm(x.detach().float() - r))
            worst = max(worst, relative_error(dist, float(torch.linalg.vector_norm(r)), r.numel(), BF16))
    return worst


def carried_errors(model: nn.Module, forward, device, seed: int, fp32, bf16) -> dict[str, tuple[float, float]]:
    """``{leaf name: (output error, input error)}`` of a bf16 forward against float32's (see the module
    docstring); ``forward()`` runs the step's loss; ``fp32``/``bf16``: the engines whose autocast runs it.
    {} when a pass raises."""
    leaves = [(n, m) for n, m in model.named_modules() if not any(True for _ in m.children())]
    kept: dict = {}
    errors: dict[str, tuple[float, float]] = {}

    def hook(name, reference):
        def fn(module, args, output):
            key = (name, calls.setdefault(name, [0])[0])
            calls[name][0] += 1
            ins, outs = float_tensors(args), float_tensors(output)
            if reference:
                kept[key] = ([t.detach().float().clone() for t in ins], [t.detach().float().clone() for t in outs])
                return
            ref = kept.get(key)
            if ref is not None:
                old = errors.get(name, (0.0, 0.0))
                errors[name] = (max(old[0], _err(outs, ref[1])), max(old[1], _err(ins, ref[0])))
        return fn

    saved = snapshot(model)
    try:
        for engine, reference in ((fp32, True), (bf16, False)):
            calls: dict = {}
            handles = [m.register_forward_hook(hook(n, reference)) for n, m in leaves]
            try:
                with torch.no_grad(), same_randomness(device, seed), engine.autocast():
                    forward()
            finally:
                for h in handles:
                    h.remove()
                restore(saved)
    except Exception:  # a model that cannot run twice more: nothing measured, the prediction says less
        return {}
    return errors
