"""``ampkit audit --compile``: does ``torch.compile`` change a module's forward under the mode?

The model's forward runs three times on the same batch and weights, no gradients, in eval mode
(inductor draws dropout masks from a generator of its own, so train-mode outputs could not agree):
eager in float32 (the reference), eager in the mode, and ``torch.compile(model)`` (the default
inductor backend) in the mode. Forward hooks on every leaf module capture its input and output;
dynamo traces registered hooks into the compiled graph, so they fire under compile too (checked in
tests/audit/test_audit_compile.py). A leaf is flagged when compiling changes its output relative to
eager by more than the mode's own eager error (the larger of the lower quartile of the leaves' errors
against float32 and eight units of the format's rounding), four times over, while its input was not already
changed that much: the module that introduced the difference is named, not those downstream of it.
A compile that fails (no C++ compiler, an unsupported op) is a note, never a crash.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from ...audit.report import Finding
from ...errors import one_line
from .engine import MixedPrecision
from .numerics.compare import tensor_relative_error
from .numerics.replay import restore, same_randomness, snapshot
from .workloads.base import call_model

__all__ = ["compile_check"]


def _rel(a: torch.Tensor, b: torch.Tensor, ref: torch.Tensor, fmt) -> float:
    """``||a - b|| / ||ref||`` by the audit's one rule (:mod:`ampkit.compare`); NaN for other shapes."""
    err = tensor_relative_error(a, b, fmt, ref)
    return math.nan if err is None else err


def _first_tensor(value):
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        return next((t for t in map(_first_tensor, value) if t is not None), None)
    if isinstance(value, dict):
        return next((t for t in map(_first_tensor, value.values()) if t is not None), None)
    return None


def _capture(model: nn.Module, forward, inputs, mp: MixedPrecision, seed: int, device) -> dict:
    """name -> (input, output) of every leaf module, float32 copies, for one forward of ``forward``."""
    seen: dict = {}

    def hook(name):
        def fn(_mod, args, out):
            i, o = _first_tensor(args), _first_tensor(out)
            if o is not None and o.is_floating_point() and name not in seen:
                seen[name] = (None if i is None or not i.is_floating_point() else i.detach().float(),
                              o.detach().float())
        return fn

    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules()
               if n and not any(True for _ in m.children())]
    try:
        with same_randomness(device, seed):
            with torch.no_grad(), mp.autocast():
                call_model(forward, inputs)
    finally:
        for h in handles:
            h.remove()
    return seen


def compile_check(model: nn.Module, inputs, mode: str, fmt, device, seed: int = 0) -> tuple[list, str | None]:
    """The compile findings and a note (why there are none to give, or what was compared)."""
    buffers = snapshot(model)
    was_training = model.training
    model.eval()  # inductor draws dropout masks from its own generator: eager's masks cannot be matched
    try:
        return _compare(model, inputs, mode, fmt, device, seed, buffers)
    finally:
        model.train(was_training)


def _compare(model, inputs, mode, fmt, device, seed, buffers) -> tuple[list, str | None]:

    ref = _capture(model, model, inputs, MixedPrecision("fp32", device), seed, device)
    restore(buffers)
    eager = _capture(model, model, inputs, MixedPrecision(mode, device), seed, device)
    restore(buffers)
    try:
        torch._dynamo.reset()
        compiled = _capture(model, torch.compile(model), inputs, MixedPrecision(mode, device), seed, device)
    except Exception as exc:  # no C++ compiler, an op inductor does not take: said, not raised
        return [], f"compile unavailable: {type(exc).__name__}: {one_line(str(exc))[:200]}"
    finally:
        restore(buffers)
        torch._dynamo.reset()
    names = [n for n in ref if n in eager and n in compiled]
    if not names:
        return [], "audit --compile: no leaf module's output was captured under compile"
    eager_err = {n: _rel(eager[n][1], ref[n][1], ref[n][1], fmt) for n in names}
    finite = [e for e in eager_err.values() if math.isfinite(e)]
    typical = sorted(finite)[len(finite) // 4] if finite else 0.0  # the lower quartile: a planted module's own
    tol = 4 * max(typical, 8 * fmt.eps)                            # large error does not raise the bar
    findings = []
    for n in names:
        (ri, ro), (ei, eo), (ci, co) = ref[n], eager[n], compiled[n]
        if not math.isfinite(eager_err[n]):  # non-finite in eager already: the audit's own finding, not compile's
            continue
        changed = _rel(co, eo, ro, fmt)
        changed_in = _rel(ci, ei, ri, fmt) if ri is not None and ei is not None and ci is not None else 0.0
        if changed > tol and not changed_in > changed / 4:
            comp_err = _rel(co, ro, ro, fmt)
            findings.append(Finding(
                n, "compile",
                f"torch.compile changes {n}'s {mode} forward by {changed:.3g} (relative to eager, above the "
                f"mode's own eager error, tolerance {tol:.3g}): error vs fp32 {eager_err[n]:.3g} eager, "
                f"{comp_err:.3g} compiled; keep it out of compile (torch.compiler.disable on its forward) "
                "or run it in float32 so eager and compiled training agree", 4,
                f"m = model.get_submodule({n!r}); m.forward = torch.compiler.disable(m.forward)"))
    return findings, (f"audit --compile: {len(names)} leaf modules compared, eager vs compiled in {mode} (eval mode: "
                      "dropout off, as compiled dropout draws other masks)")
