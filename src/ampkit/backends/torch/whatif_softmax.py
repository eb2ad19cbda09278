"""``--what-if``: how much a format's rounding of a softmax's input changes its output (issue #50).

A softmax turns an *absolute* error of its input into a *relative* error of its output: attention
scores of magnitude ~1e4 rounded to bfloat16 (8 significant bits, errors ~40) give probabilities
that have little to do with float32's, though every tensor's own rounding noise is small against
its spread (what :func:`ampkit.audit.whatif_bf16.bf16_prediction` judges tensor by tensor). So for each
``softmax`` and ``scaled_dot_product_attention`` a module's own code calls in the float32 what-if
forward, the op runs again on its inputs rounded to each format (for attention: ``q``, ``k`` and ``v``,
the scores from them in float32, as the fused kernel computes them) and the relative error of its output against
float32's is kept: the module's predicted error, judged as the audit judges a module's measured
one (:func:`ampkit.audit.core.module_limit`).

What it does not see: the errors the inputs carry from the layers before (a weight rounded once
shifts a feature of every token alike, and a dot product adds such errors up): measured on GPT-2
with q/k scaled x300 (bf16, CPU, SDPA), rounding q, k and v once changes the attention outputs by
0.35-0.41% where the real bf16 run's differ by 1.5% and 13.9%. So this is a lower bound, sound where
the scores themselves are rounded (an explicit ``softmax(q @ k^T)`` in bf16), and the real audit
(which measures what the run carries) remains the judge of a softmax fed by a long chain of layers.
"""

from __future__ import annotations

import math

import torch

#: ops emulated per format, and the dtypes of the formats
OPS = frozenset({"softmax", "scaled_dot_product_attention"})
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def _rounded(t: torch.Tensor, fmt: str) -> torch.Tensor:
    """``t`` rounded to the format and back, in float32."""
    return t.detach().float().to(DTYPES[fmt]).float()


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    diff = torch.nan_to_num(a - b, nan=0.0, posinf=0.0, neginf=0.0)
    ref = torch.nan_to_num(b, nan=0.0, posinf=0.0, neginf=0.0)
    den = float(torch.linalg.vector_norm(ref))
    return float(torch.linalg.vector_norm(diff)) / den if den > 0 else 0.0


def _softmax(args, kwargs, fmt) -> float | None:
    x = args[0] if args else kwargs.get("input")
    dim = args[1] if len(args) > 1 else kwargs.get("dim", -1)
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or dim is None:
        return None
    x = x.detach().float()
    return _rel(torch.softmax(_rounded(x, fmt), dim), torch.softmax(x, dim))


def _attention(args, kwargs, fmt) -> float | None:
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale")
    a = {**dict(zip(names, args)), **kwargs}
    q, k, v = a.get("query"), a.get("key"), a.get("value")
    if not all(isinstance(t, torch.Tensor) and t.is_floating_point() for t in (q, k, v)) or k.shape[-3:-2] != v.shape[-3:-2]:
        return None
    if q.shape[-3:-2] != k.shape[-3:-2]:  # grouped-query heads: not emulated
        return None
    scale = a.get("scale") or 1.0 / math.sqrt(q.shape[-1])
    mask, causal = a.get("attn_mask"), bool(a.get("is_causal"))

    def attend(q, k, v):
        s = (q.float() @ k.float().transpose(-2, -1)) * scale
        if causal:
            s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril(), -math.inf)
        if isinstance(mask, torch.Tensor):
            s = s.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else s + mask.float()
        return torch.softmax(s, -1) @ v.float()

    return _rel(attend(*(_rounded(t, fmt) for t in (q, k, v))), attend(q.detach(), k.detach(), v.detach()))


def format_errors(op: str, args, kwargs) -> dict[str, float]:
    """``{format: relative error of the op's output}`` with its inputs rounded to each format (see the
    module docstring); {} for an op or arguments it does not emulate."""
    fn = _softmax if op == "softmax" else _attention if op == "scaled_dot_product_attention" else None
    if fn is None:
        return {}
    out = {}
    with torch.no_grad(), torch._C.DisableTorchFunction():
        for name in DTYPES:
            try:
                err = fn(args, kwargs or {}, name)
            except (RuntimeError, TypeError, ValueError, IndexError):  # a shape this emulation does not know
                return {}
            if err is not None:
                out[name] = err
    return out
