"""The precision contract of a Keras model: is the declared mixed precision what the model really does?"""

from __future__ import annotations

from ..flavor import flavor_of
from .policy import float16_layers, layers_of

LOW = ("float16", "bfloat16")


def _own_variables(layer) -> list:
    return list(getattr(layer, "weights", []) or [])


def _dtype(v) -> str:
    d = getattr(v, "dtype", None)
    return str(getattr(d, "name", d))


def _output_layers(model) -> list:
    """The layers whose outputs are the model's outputs (functional models), else the last layer."""
    found = []
    for t in getattr(model, "outputs", None) or []:
        hist = getattr(t, "_keras_history", None)
        layer = getattr(hist, "operation", None) or getattr(hist, "layer", None) \
            or (hist[0] if isinstance(hist, tuple) and hist else None)
        while layer is not None and getattr(layer, "layers", None):  # a nested model: its own last layer
            layer = layer.layers[-1]
        if layer is not None and layer not in found:
            found.append(layer)
    if not found:
        leaves = layers_of(model)
        if leaves:
            found.append(leaves[-1])
    return found


def fp32_hint(model, layer) -> str:
    flavor = flavor_of(layer)
    code = flavor.fp32_layer_code(layer.name) if flavor else f"model.get_layer({layer.name!r}).dtype_policy = 'float32'"
    return f"build it with dtype='float32' (or end the model with ampkit.keras.float32_output), or `{code}`"


def verify(model, compute_dtype: str, mode: str, optimizer=None) -> list[dict]:
    """The findings for ``model`` under a mode whose policy computes in ``compute_dtype``."""
    findings = []
    outputs = {id(lay) for lay in _output_layers(model)}
    for layer in layers_of(model):
        findings += verify_layer(layer, compute_dtype, mode, id(layer) in outputs)
    unapplied = policy_unapplied_finding(model, compute_dtype, mode)
    if unapplied:
        findings.append(unapplied)
    scaling = loss_scaling_finding(model, optimizer)
    if scaling:
        findings.append(scaling)
    return findings


def verify_layer(layer, compute_dtype: str, mode: str, is_output: bool) -> list[dict]:
    """One layer's breaches of the contract (at most one finding)."""
    expected, actual, advice = [], [], []
    low_vars = [v for v in _own_variables(layer) if _dtype(v) in LOW]
    if low_vars:
        names = ", ".join(getattr(v, "path", None) or v.name for v in low_vars[:3])
        expected.append("float32 variables (master weights)")
        actual.append(f"{_dtype(low_vars[0])} variables ({names}{', ...' if len(low_vars) > 3 else ''})")
        advice.append("keep variables float32: give the layer a mixed policy (mixed_float16/mixed_bfloat16) "
                      "or float32, not a bare float16/bfloat16 dtype")
    compute = None if _is_input(layer) else getattr(layer, "compute_dtype", None)  # an input computes nothing
    if is_output and compute in LOW:
        expected.append("float32 compute (the output layer)")
        actual.append(f"{compute} compute")
        advice.append(fp32_hint(None, layer))
    elif compute in LOW and compute != compute_dtype:
        expected.append(f"{compute_dtype} compute (mode {mode})")
        actual.append(f"{compute} compute")
        advice.append("build the model inside mp.scope() so the layer takes the mode's policy "
                      "(a layer given an explicit dtype keeps it)")
    if not expected:
        return []
    return [{"where": f"layer {layer.name!r}" + (" (output)" if is_output else ""),
             "expected": "; ".join(expected), "actual": "; ".join(actual), "advice": "; ".join(advice)}]


def _is_input(layer) -> bool:
    return type(layer).__name__ == "InputLayer"


def policy_unapplied_finding(model, compute_dtype: str, mode: str) -> dict | None:
    """A mode that computes in float16/bfloat16 while no layer of the model does (built outside mp.scope():
    the policy was declared, never applied), said once for the model."""
    if compute_dtype not in LOW:
        return None
    working = [lay for lay in layers_of(model) if not _is_input(lay) and _own_variables(lay)]
    if not working or any(getattr(lay, "compute_dtype", None) in LOW for lay in working):
        return None
    return {"where": f"model {getattr(model, 'name', type(model).__name__)!r}",
            "expected": f"{compute_dtype} compute (mode {mode}) in its layers",
            "actual": f"every layer computes in {getattr(working[0], 'compute_dtype', 'float32')} "
                      f"({len(working)} layers with weights): the mode's policy was never applied",
            "advice": "build the model inside mp.scope() (a model built before or outside it keeps the policy "
                      "of its build)"}


def loss_scaling_finding(model, optimizer=None) -> dict | None:
    """A float16-computing model and an optimizer (given, or the compiled one) that does not scale the loss."""
    opt = optimizer if optimizer is not None else getattr(model, "optimizer", None)
    half = float16_layers(model)
    flavor = flavor_of(opt) if opt is not None else None
    if not half or flavor is None or flavor.is_loss_scale_optimizer(opt):
        return None
    shown = ", ".join(repr(n) for n in half[:3]) + (f" and {len(half) - 3} more" if len(half) > 3 else "")
    return {"where": "optimizer",
            "expected": "a LossScaleOptimizer (dynamic loss scaling): layers compute in float16",
            "actual": f"{type(opt).__name__} without loss scaling; float16 layers: {shown}",
            "advice": "wrap it: mp.optimizer(opt) (any mode: it scales when the model computes in float16); "
                      "small float16 gradients underflow to zero without it"}


def audit_findings(model, mode: str, fp32_hint) -> list:
    """The contract of the audited model as ``ampkit audit`` findings of kind ``"contract"``: an output
    layer computing in float16/bfloat16 (keras.applications' softmax under ``mixed_float16``: the
    probabilities and the loss's log lose precision, and small ones flush), float16 variables. Each
    names its layer, with ``fp32_hint(name)`` as the code for an output layer."""
    from ....audit.report import SEVERITY, Finding

    compute = {"fp16": "float16", "bf16": "bfloat16"}.get(mode)
    if compute is None:
        return []
    outputs = {id(lay): lay.name for lay in _output_layers(model)}
    found = []
    for layer in layers_of(model):
        name = layer.name
        for f in verify_layer(layer, compute, mode, id(layer) in outputs):
            code = fp32_hint(name) if "output layer" in f["expected"] else None
            found.append(Finding(name, "contract", f"expected {f['expected']}, found {f['actual']}: {f['advice']}",
                                 SEVERITY["contract"], code))
    return found
