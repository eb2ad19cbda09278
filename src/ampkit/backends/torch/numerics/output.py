"""The model's output layer in low precision: an audit finding (PyTorch).

Under autocast a Linear head returns float16/bfloat16 logits, and torch's losses take them as they
should (``cross_entropy`` runs in float32 under autocast): that is no finding. Two outputs are:

* an output the model makes low-precision *itself* -- still float16/bfloat16 in the float32
  reference, where no autocast runs: a ``.half()``-ed head or a cast in ``forward``. The logits keep
  11 (fp16) or 8 (bf16) significant bits whatever the loss does, and the head's weights train in
  low precision;
* probabilities (a ``Softmax``, ``LogSoftmax`` or ``Sigmoid`` as the last module) in float16 or
  bfloat16: fp16 flushes probabilities under 6e-8 to zero and a log of them is -inf.

The fix keeps the output layer in float32, as Keras' mixed-precision guide does with
``dtype="float32"`` on the last layer.
"""

from __future__ import annotations

from ....audit.report import SEVERITY, Finding, LayerStats

LOW = ("float16", "bfloat16")
PROBABILITY_TYPES = ("Softmax", "LogSoftmax", "Sigmoid", "Softmax2d")


def _low(dtypes) -> str | None:
    kinds = set(dtypes.split(",") if isinstance(dtypes, str) else dtypes or ())
    return next((d for d in LOW if d in kinds), None)


def output_finding(layers: list[LayerStats], ref_dtypes: set, model, expr, fp32_hint) -> Finding | None:
    """The finding for the model's output (``layers``: the audit's, the root module last in
    completion order), or None. ``ref_dtypes``: the root's output dtypes in the float32 reference;
    ``expr(name)``: Python reaching a submodule from ``model``; ``fp32_hint(name)``: code keeping
    one module in float32 under autocast."""
    root = next((lay for lay in reversed(layers) if lay.name == ""), None)
    low = _low(root.fwd_dtype) if root is not None else None
    if low is None:
        return None
    head = next((lay for lay in reversed(layers) if lay.leaf and lay.name), root)
    itself, probs = _low(ref_dtypes), head.type in PROBABILITY_TYPES
    if not (itself or probs):
        return None
    what = "probabilities" if probs else "logits"
    why = (f" even in the float32 reference, where no autocast runs: the model makes it {itself} itself "
           "(a .half()/.to() head or a cast in forward)" if itself else " (autocast runs it in low precision)")
    harm = ("fp16 flushes probabilities below 6e-8 to zero, and a log of them is -inf"
            if probs and low == "float16" else
            f"{what} keep {11 if low == 'float16' else 8} significant bits, and the loss and its gradient start from them")
    if itself:
        module = next((m for n, m in model.named_modules() if n == head.name), None)
        cast = f"{expr(head.name)}.float()\n" if module is not None and any(
            p.is_floating_point() and str(p.dtype).removeprefix("torch.") in LOW for p in module.parameters()) else ""
        code = (cast + "model.register_forward_hook(lambda mod, args, out: out.float() "
                "if isinstance(out, torch.Tensor) else out)")
    else:
        code = fp32_hint(head.name)
    advice = (f"expected a float32 output, found {low}: the model's output ({head.type} {head.name or '(model)'}, "
              f"{what}) is {low}{why}; {harm}: keep the output layer in float32 (as Keras' dtype='float32' on "
              "the last layer does)")
    return Finding(head.name, "contract", advice, SEVERITY["contract"], code)
