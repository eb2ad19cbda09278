"""Which float32 gradients are rounding noise: the same step in float64, for the audit's underflow candidates.

A gradient whose true value is zero can come out of float32 as tiny nonzero values: timm's
``mobilevit_xxs`` at 64 px runs attention over one token in its last stage, so the true gradients
w.r.t. q and k are exactly zero (softmax over one element), but ``scaled_dot_product_attention``'s
backward computes ``P * (dP - rowsum(dO * O))`` in another summation order than ``dP``, leaving
values ~1e-7 of the other gradients (fp32 vs fp64: relative 5e8). fp16 then "loses" them -- and loses
nothing: they were never there. So before an underflow finding is raised, the module's gradients are
taken once more in float32 and in float64 (a copy of the model, the same batch and random numbers,
no autocast) and each nonzero float32 value is judged against float64's: one off by half or more is
noise. Runs only for underflow candidates, once per module; a model that cannot run in float64 (or
whose float64 output does not match float32's: different random numbers) leaves the question open.
"""

from __future__ import annotations

import copy
import dataclasses

import torch

from ..engine import MixedPrecision
from .hooks import float_tensors
from .replay import restore, same_randomness

#: a float32 value this far (relative) from float64's is rounding noise, not a gradient fp16 could lose
NOISE_REL = 0.5
#: the float64 pass is trusted as the same computation when the loss agrees with float32's this closely
SAME_LOSS_REL = 1e-3


def _outputs_grads(model, workload, batch, names: set, device, seed: int):
    outs: dict = {}

    def keep(name):
        def hook(module, args, output):
            t = next((x for x in float_tensors(output) if x.requires_grad), None)
            if t is not None and name not in outs:  # the first call's output
                outs[name] = t
        return hook

    handles = [m.register_forward_hook(keep(n)) for n, m in model.named_modules() if n in names]
    try:
        with same_randomness(device, seed), MixedPrecision("fp32", device).autocast():  # TF32 off, as the reference
            loss = workload.loss(batch)
            keys = list(outs)
            grads = torch.autograd.grad(loss, [outs[k] for k in keys], allow_unused=True)
    finally:
        for h in handles:
            h.remove()
    return float(loss.detach()), {k: g for k, g in zip(keys, grads) if g is not None}


def _double(obj):
    if isinstance(obj, torch.Tensor):
        return obj.double() if obj.is_floating_point() else obj
    if isinstance(obj, dict):
        return {k: _double(v) for k, v in obj.items()}
    if isinstance(obj, (tuple, list)):
        return type(obj)(_double(v) for v in obj)
    return obj


def noise_shares(model, workload, batch, names: set, device, seed: int, buffers,
                 lost_at: float) -> dict[str, tuple[float, float]]:
    """``{module: (noise, lost signal)}`` for ``names``: the shares of its nonzero float32 output-gradient
    values that are rounding noise, and that are not noise but lost (``|g| < lost_at``: the format's
    lost limit over the loss scale); empty when the float64 check cannot be made. Buffers are put back."""
    try:
        loss32, g32 = _outputs_grads(model, workload, batch, names, device, seed)
        restore(buffers)
        m64 = copy.deepcopy(model).double()
        loss64, g64 = _outputs_grads(m64, dataclasses.replace(workload, model=m64), _double(batch), names, device, seed)
    except Exception:  # a model or loss that does not run in float64: no verdict on noise
        restore(buffers)
        return {}
    restore(buffers)
    if not abs(loss64 - loss32) <= SAME_LOSS_REL * max(abs(loss64), 1e-30):
        return {}  # not the same computation (random numbers drawn differently): no verdict
    out = {}
    for name, a in g32.items():
        b = g64.get(name)
        if b is None or b.shape != a.shape:
            continue
        a64 = a.detach().double()
        nonzero = a64 != 0
        n = int(nonzero.sum())
        if n:
            noise = ((a64 - b.detach()).abs() >= NOISE_REL * a64.abs()) & nonzero
            lost = nonzero & ~noise & (a64.abs() < lost_at)
            out[name] = (int(noise.sum()) / n, int(lost.sum()) / n)
    return out


def underflow_candidates(ref_grad: dict, threshold: float) -> set[str]:
    """Modules whose reference output gradients (``{(name, call): [[amax, nonzero, under, lost], ...]}``)
    lose more than ``threshold`` of their nonzero values at the loss scale: where a finding could be raised."""
    counts: dict = {}
    for (name, _), rows in ref_grad.items():
        nz, lost = counts.get(name, (0.0, 0.0))
        counts[name] = (nz + sum(r[1] for r in rows), lost + sum(r[3] for r in rows))
    return {name for name, (nz, lost) in counts.items() if nz and lost / nz > threshold}
