"""The precision contract of mixed-precision training, checked: ``mp.verify(model, optimizer)``."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ....errors import UsageError
from .watch import LOW, LayerSeen, fsdp_units, intended_policy, kind_of, reduce_dtype_of, watch_layers

__all__ = ["verify_torch", "verify_engine", "audit_findings", "CHECKS"]

CHECKS = ("master_weights", "gradients", "optimizer_state", "autocast", "loss", "fsdp_param_dtype",
          "fsdp_reduce_dtype", "fsdp_policy", "plan")
F32 = torch.float32
_SHOWN = 4


def _name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _listing(names: Sequence[str]) -> str:
    names = list(names)
    shown = ", ".join(names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def _finding(check, where, expected, actual, advice) -> dict:
    return {"where": where, "expected": expected, "actual": actual, "advice": advice, "check": check}


def _as_dtype(dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    value = getattr(torch, str(dtype).replace("torch.", ""), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"compute_dtype must be a torch dtype or its name (float16, bfloat16, float32), "
                         f"received {dtype!r}")
    return value


def verify_torch(model: torch.nn.Module, optimizer=None, *, compute_dtype, loss_dtype=None,
                 layers: dict[str, LayerSeen] | None = None, grads: dict | None = None,
                 unfit: dict | None = None, example_input=None,
                 autocast: Callable | None = None, kept: Callable[[str], bool] | None = None) -> list[dict]:
    """The findings of the precision contract for ``model`` (and its optimizer(s)); [] when it holds.

    Args:
        compute_dtype: the dtype autocast should run matmuls/convs in (float32 for fp32/tf32).
        loss_dtype: the dtype of the loss (a dtype or the loss tensor); None: not checked.
        layers: the recorded forward (:class:`.watch.ContractWatch`); None and no ``example_input``:
            autocast is not checked.
        grads: ``{id(param): grad dtype}`` recorded at a step; None: the parameters' ``.grad`` now.
        unfit: ``{FSDP unit name: device flag}`` recorded at a step; None: computed from ``.grad`` now.
        example_input: run one forward under ``autocast()`` (no grad) and check its layers.
        autocast: makes the forward region (default ``torch.autocast`` in ``compute_dtype`` on the
            model's device when that is float16/bfloat16, else nothing).
        kept: ``name -> bool``, the layers a precision plan keeps in float32 (``mp.plan``): they must
            run in float32, and one that ran in float16/bfloat16 is a finding (check ``"plan"``).
    """
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"verify() needs a torch.nn.Module, received {type(model).__name__}")
    compute = _as_dtype(compute_dtype)
    opts = [] if optimizer is None else list(optimizer) if isinstance(optimizer, (list, tuple)) else [optimizer]
    for opt in opts:
        if not isinstance(opt, torch.optim.Optimizer):
            raise UsageError(f"verify() takes torch optimizers, received {type(opt).__name__}")
    names = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), n)
    findings, flagged = _master_weights(model)
    findings += _gradients(model, flagged, grads)
    findings += _optimizer_state(opts, names, flagged)
    if example_input is not None:
        layers = probe(model, example_input, compute, autocast)
    if layers:
        findings += _autocast(layers, compute, kept)
    if loss_dtype is not None:
        findings += _loss(loss_dtype.dtype if isinstance(loss_dtype, torch.Tensor) else loss_dtype)
    findings += _fsdp(model, layers or {}, unfit)
    return findings


def verify_engine(mp, model, optimizer, example_input) -> list[dict]:
    """``mp.verify``: :func:`verify_torch` with what the engine knows (its mode's compute dtype, its
    forward region, the last loss, what its watch recorded); then the watch is armed again, so the
    next forward and step are recorded afresh."""
    model = model if model is not None else mp.model
    if model is None:
        raise UsageError("verify() needs the model: mp.verify(model) (or mp.prepare(model) before)")
    watch = mp._watch
    mine = watch.watches(model)
    findings = verify_torch(
        model, optimizer, compute_dtype=_compute_dtype(mp), loss_dtype=mp._loss_dtype,
        layers=watch.layers if mine else None, grads=watch.grads if mine else None,
        unfit=watch.unfit if mine and watch.grads is not None else None, example_input=example_input,
        autocast=mp.autocast, kept=mp._islands.in_fp32 if mp._islands is not None else None)
    watch.arm(model)
    return findings


def _compute_dtype(mp) -> torch.dtype:
    # fp8's forward region is bf16 autocast around the Float8Linear layers (.fp8)
    return _as_dtype("bfloat16" if getattr(mp, "_fp8", None) else mp.precision.compute_dtype)


def audit_findings(mp, model, optimizer) -> list:
    """The contract after ``ampkit audit``'s first trained step, as audit findings of kind
    ``"contract"``: master weights, optimizer state, the loss (the audit runs the forward itself, under
    the engine's region, so autocast coverage is the audit's own per-layer ``fwd_dtype``)."""
    from ....audit.report import SEVERITY, Finding

    return [Finding(f["where"], "contract", f"expected {f['expected']}, found {f['actual']}: {f['advice']}",
                    SEVERITY["contract"])
            for f in verify_torch(model, optimizer, compute_dtype=_compute_dtype(mp), loss_dtype=mp._loss_dtype)]


def _master_weights(model):
    findings, flagged, seen = [], set(), set()
    for mname, module in model.named_modules():
        bad: dict = {}
        for pname, p in module.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            if p.is_floating_point() and p.dtype != F32:
                bad.setdefault(p.dtype, []).append(pname)
                flagged.add(id(p))
        for dtype, pnames in bad.items():
            where = f"layer {mname or 'model'} ({kind_of(module)}): {_listing(pnames)}"
            findings.append(_finding(
                "master_weights", where, "float32 master weights", _name(dtype),
                f"mixed precision keeps the weights in float32 and autocast casts the compute; remove the "
                f".half()/.to({_name(dtype)}) that cast {mname or 'the model'} (or call .float() on it "
                "before the optimizer is created)"))
    return findings, flagged


def _gradients(model, flagged, grads):
    findings = []
    for mname, module in model.named_modules():
        bad: dict = {}
        for pname, p in module.named_parameters(recurse=False):
            if id(p) in flagged:
                continue  # its gradient follows the parameter: one root cause, one finding
            dtype = grads.get(id(p)) if grads is not None else (p.grad.dtype if p.grad is not None else None)
            if dtype is not None and dtype.is_floating_point and dtype != F32:
                bad.setdefault(dtype, []).append(pname)
        for dtype, pnames in bad.items():
            findings.append(_finding(
                "gradients", f"gradients of layer {mname or 'model'} ({kind_of(module)}): {_listing(pnames)}",
                "float32 gradients", _name(dtype),
                "gradients of float32 master weights are float32; a hook or wrapper that casts them loses "
                "the small updates — remove it"))
    return findings


def _optimizer_state(opts, names, flagged):
    findings = []
    for i, opt in enumerate(opts):
        bad: dict = {}
        for gi, group in enumerate(opt.param_groups):
            for pi, p in enumerate(group["params"]):
                if id(p) in flagged:
                    continue
                for key, value in opt.state.get(p, {}).items():
                    if key == "step" or not isinstance(value, torch.Tensor) or not value.is_floating_point():
                        continue
                    if value.dtype != F32:
                        keys, params = bad.setdefault(value.dtype, ({}, {}))
                        keys[key] = None
                        params[names.get(id(p), f"param_groups[{gi}][{pi}]")] = None
        for dtype, (keys, params) in bad.items():
            findings.append(_finding(
                "optimizer_state", f"optimizer {i} ({type(opt).__name__}) state of {_listing(list(params))}",
                f"float32 ({', '.join(keys)})", _name(dtype),
                f"keep the optimizer state in float32: {_name(dtype)} moments round away the small updates "
                "they accumulate; do not cast the state (or load a state_dict saved in low precision) — "
                "cast it back with .float()"))
    return findings


def probe(model, example_input, compute: torch.dtype, autocast: Callable | None) -> dict[str, LayerSeen]:
    """One forward of ``example_input`` under the forward region, without gradients: what each
    matmul/conv layer ran in."""
    layers: dict[str, LayerSeen] = {}
    handles = watch_layers(model, layers)
    if autocast is None:
        device = next((p.device.type for p in model.parameters()), "cpu")
        autocast = ((lambda: torch.autocast(device, dtype=compute)) if compute in LOW
                    else (lambda: torch.autocast(device, enabled=False)))
    inputs = example_input if isinstance(example_input, (tuple, list)) else (example_input,)
    try:
        with torch.no_grad(), autocast():
            if isinstance(example_input, dict):
                model(**example_input)
            else:
                model(*inputs)
    except Exception as exc:  # the model's own error on this input, in one line (the cause stays chained)
        raise UsageError(f"verify(example_input=...): the model's forward failed on it: "
                         f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
    finally:
        for h in handles:
            h.remove()
    return layers


def _autocast(layers: dict[str, LayerSeen], compute: torch.dtype, kept: Callable[[str], bool] | None = None):
    groups: dict = {}
    for name, seen in layers.items():
        if kept is not None and kept(name):  # a plan's float32 island: float32 is the contract there
            if seen.output is not None and seen.output in LOW:
                groups.setdefault((("plan", "kept in float32 by the plan, but its matmul ran in "
                                    f"{_name(seen.output)}", "the plan's island did not apply: run the forward "
                                    "through the model given to mp.prepare(model) (not a copy or a compiled "
                                    "graph without its hooks), and do not cast inside the island"), seen.output,
                                   "plan"), []).append(f"{name} ({seen.kind})")
            continue
        if seen.output is None or not seen.output.is_floating_point or seen.output == compute:
            continue
        if compute in LOW and not seen.autocast and not seen.entry:
            cause = ("not_active", "autocast was not active", "run the forward and the loss inside "
                     "`with mp.autocast():` (the engine's region, in the mode's dtype)")
        elif compute in LOW and seen.autocast and seen.autocast_dtype != compute:
            cause = ("other_dtype", f"autocast ran in {_name(seen.autocast_dtype)}",
                     "use mp.autocast() instead of a torch.autocast of your own with another dtype")
        elif compute in LOW:
            cause = ("excluded", "outside autocast's cast (an autocast(enabled=False) region in the model, "
                     f"or {_name(seen.weight)} weights autocast does not cast)",
                     "if the layer is kept in float32 on purpose, ignore this; else remove the "
                     "autocast(enabled=False) around it")
        else:
            cause = ("low_in_fp32", f"autocast to {_name(seen.output)} in a float32 mode",
                     "a float32 mode runs without autocast: remove the torch.autocast around the forward, "
                     "or choose the fp16/bf16 mode")
        groups.setdefault((cause, seen.output, "autocast"), []).append(f"{name} ({seen.kind})")
    findings = []
    for ((_, said, advice), dtype, check), where in groups.items():
        findings.append(_finding(
            check, f"{'layer' if len(where) == 1 else 'layers'} {_listing(where)}",
            f"matmul/conv in {_name(compute if check == 'autocast' else F32)}", f"{_name(dtype)}: {said}", advice))
    return findings


def _loss(dtype):
    if dtype not in LOW:
        return []
    return [_finding("loss", "loss", "float32 loss", _name(dtype),
                     "compute the loss in float32: autocast runs losses such as cross_entropy in float32, but a "
                     "loss built by hand from low-precision outputs stays low precision — call .float() on the "
                     "model's output before the loss")]


def _fsdp(model, layers, unfit):
    units = fsdp_units(model)
    if not units:
        return []
    if unfit is None:
        from .watch import unfit_gradients

        unfit = unfit_gradients(model)
    findings = []
    for i, (name, module, group) in enumerate(units):
        policy, inherited = intended_policy(units, i)
        label = f"FSDP unit {name or 'model'} ({kind_of(module)})"
        origin = ("the root's MixedPrecisionPolicy; this unit was given none" if inherited
                  else "its MixedPrecisionPolicy")
        advice = ("pass the same mp_policy to every fully_shard call: FSDP2 applies a policy only to the "
                  "parameters of the module it was given" if inherited
                  else "the policy is declared but not applied: report this FSDP2 version's behaviour")
        pnames = [fp._module_info.param_name for fp in group.fsdp_params]
        checks, expected, actual = [], [], []
        want = policy.param_dtype
        if want is not None and want != F32:
            wrong = {s.weight: None for n, s in layers.items()
                     if s.weight is not None and s.weight != want and _in_unit(n, name, units)}
            if wrong:
                checks.append("fsdp_param_dtype")
                expected.append(f"param_dtype={_name(want)}")
                actual.append(f"{'/'.join(_name(d) for d in wrong)} weights in the forward")
        rd = reduce_dtype_of(policy)
        flag = unfit.get(name)
        if rd in LOW and flag is not None and bool(flag):  # reads the device flag: verify only
            checks.append("fsdp_reduce_dtype")
            expected.append(f"reduce_dtype={_name(rd)}")
            actual.append(f"gradients hold values {_name(rd)} cannot: reduced in float32")
        if checks:  # one unit, one root cause: one finding
            findings.append(_finding(checks[0] if len(checks) == 1 else "fsdp_policy",
                                     f"{label}: {'gradients of ' if checks == ['fsdp_reduce_dtype'] else ''}"
                                     f"{_listing(pnames)}",
                                     f"{', '.join(expected)} ({origin})", "; ".join(actual), advice))
    return findings


def _in_unit(layer: str, unit: str, units) -> bool:
    """Whether a layer's parameters belong to ``unit`` (not to a unit nested inside it)."""
    inner = [n for n, _, _ in units if n != unit and (unit == "" or n.startswith(unit + "."))]
    if unit and not (layer == unit or layer.startswith(unit + ".")):
        return False
    return not any(layer == n or layer.startswith(n + ".") for n in inner)

