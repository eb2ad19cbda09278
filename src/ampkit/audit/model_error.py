"""A model-level finding: an output error far beyond the format's, grown gradually (framework-neutral).

The per-module precision findings name a module that makes its error itself (at least
``AMPLIFICATION`` times what its inputs bring). An error can also grow without any such module: each
of many layers adds to it a little less than twice (measured on torchvision's regnet_y_400mf in bf16,
train mode, 2x2 feature maps: the output 17-18% from float32, 127 modules above the threshold, no
module doubling its input's error). The verdict must not then be "healthy": when the model's output
(the last layer, what every module's error adds up to) differs from the reference by more than the
format's threshold, modules exceed theirs and none was named, this finding says so at the model level.
"""

from __future__ import annotations

# MODEL_UNITS (ampkit.formats, beside module_limit): the model's output is beyond what its format costs from
# this many rounding units (12.5% in bf16, 1.6% in fp16): rounding every layer's output costs a deep network a
# few to ~15 units (torchvision/timm ResNets, MobileNet, HF BERT/GPT-2: ampkit.audit.core's PRECISION_UNITS);
# regnet_y_400mf's 17.45% in bf16 is 45 units: twice the most seen there
from ..formats import MODEL_UNITS, FloatFormat
from .report import SEVERITY, Finding, LayerStats


def grown_inside_finding(layers: list[LayerStats], fmt: FloatFormat, mode: str, limit: float, amplification: float,
                         findings: list[Finding], fp32_code) -> Finding | None:
    """The finding for an error made between two leaf modules (in their container's own code: attention's
    softmax over scores a format rounds coarsely, say), or None. In execution order, the first leaf whose
    output differs from the reference by more than ``limit`` and whose *inputs* already do (at least half
    its error: it passes the error on, it does not make it), preceded by a leaf at most 1/``amplification``
    of that input error: the error grew in the code that runs between them, the deepest module holding
    both. ``fp32_code(name)``: the advice's code for keeping a module in float32."""
    if mode == "fp8" or any(f.kind in ("precision", "nonfinite") for f in findings):
        return None
    leaves = [lay for lay in layers if lay.leaf and lay.rel_error is not None and lay.fwd_nonfinite == 0]
    for prev, lay in zip(leaves, leaves[1:]):
        if lay.rel_error <= limit:
            continue
        got = lay.input_rel_error
        if got is None or got * amplification < lay.rel_error or prev.rel_error * amplification > got:
            return None  # not measured, made by the leaf itself (its own finding), or grown gradually
        home = _common(prev.name, lay.name)
        who = home or "(model)"
        return Finding(home, "precision",
                       f"its output differs from float32 by {lay.rel_error:.1%} under {mode} ({lay.name}'s, "
                       f"{lay.rel_error / 2.0 ** -(fmt.mantissa_bits + 1):.0f}x {fmt.name}'s rounding unit; findings from "
                       f"{limit:.1%}), and the error grows inside {who}'s own code: {prev.name} gives "
                       f"{prev.rel_error:.2%}, {lay.name} receives {got:.1%} -- what runs between them (a softmax "
                       f"over scores, a normalization, a difference of close values) amplifies {fmt.name}'s "
                       f"rounding {got / max(prev.rel_error, 1e-12):.0f}x; keep {who} in float32: {fp32_code(home)}",
                       SEVERITY["precision"])
    return None


def _common(a: str, b: str) -> str:
    """The deepest module holding both (dotted names; "" is the root)."""
    pa, pb = a.split("."), b.split(".")
    n = 0
    while n < min(len(pa), len(pb)) - 1 and pa[n] == pb[n]:
        n += 1
    return ".".join(pa[:n])


def gradual_error_finding(layers: list[LayerStats], fmt: FloatFormat, mode: str, limit: float, unit: float,
                          findings: list[Finding]) -> Finding | None:
    """The finding for a model whose output error exceeds :data:`MODEL_UNITS` rounding units (``unit``:
    the format's) while modules exceed the per-module threshold ``limit`` and no precision finding names
    one of them (none doubles its inputs' error), or None."""
    if mode == "fp8" or not layers or any(f.kind in ("precision", "nonfinite") for f in findings):
        return None
    out = layers[-1]
    err, beyond = out.rel_error, MODEL_UNITS * unit
    if err is None or err <= beyond or out.fwd_nonfinite:
        return None
    above = [lay for lay in layers if lay.leaf and lay.rel_error is not None and lay.rel_error > limit]
    if not above:  # deep networks reach 30-35 units at their output with every module within its threshold
        return None  # (torchvision resnet18, 32 px, batch 4, train mode: 35 in fp16, 29 in bf16): no finding
    grows = [lay for lay in layers if lay.leaf and lay.rel_error is not None and lay.rel_error > beyond]
    first = grows[0] if grows else None
    where = (f"; it passes {beyond:.1%} first at {first.type} {first.name} ({first.rel_error:.1%}), and {len(above)} "
             f"modules exceed the per-module threshold {limit:.2%}" if first else "")
    start = first.name if first else "the first module above it"
    instead = (f"keep the modules from {start} on in float32; fp16's 3 more mantissa bits cut such an error about "
               "8x (with loss scaling)" if mode == "bf16" else f"keep the modules from {start} on in float32")
    advice = (f"the model's output differs from float32 by {err:.1%} under {mode}, {err / unit:.0f}x {fmt.name}'s "
              f"rounding unit, beyond the {MODEL_UNITS}x ({beyond:.1%}) that rounding every layer costs a deep "
              f"network{where}; no single module makes it (none has twice its inputs' error): it grows gradually "
              "through the network -- normalization over few values and differences of close numbers amplify "
              f"each layer's rounding. {instead}")
    return Finding(out.name, "precision", advice, SEVERITY["precision"])
