"""Where a forward's first inf/NaN that *matters* is made: the op and the innermost module whose own code ran it.

Module hooks see outputs only, so the module they name is the first whose output held an inf/NaN
-- often one that merely received it (an attention's output projection after scores that
overflowed in the attention's own forward). :class:`OpTrace` watches every torch function call of
one forward (a :class:`torch.overrides.TorchFunctionMode`: ``matmul``, ``softmax``, ``exp``,
``add``, ``linear``, ``layer_norm`` ...) together with the stack of modules running, and follows
each non-finite value: an op whose floating output is non-finite while its inputs are finite is a
*candidate* (the module on top of the stack, leaf or not, and the op; its inputs' amaxes; the op run
once more on its inputs in float32 with autocast off: ``in_reference``); an op fed a non-finite
value passes that value's candidate on to its output. The origin is the candidate whose value
reaches the module output that failed (``recipient``) or, without one, the forward's own output: a
value the model computes and discards or clamps on purpose -- T5's relative-position bucketing
takes ``log(0) = -inf`` in float32 too, then casts it to an integer bucket -- reaches nothing and
is never named.

Cost: one ``isfinite().all()`` read (a host-device sync) per op and an amax per module call,
so it is never on during normal training: the audit, the engine's locator and the trainer
callbacks record module outputs only, and trace one forward (a replay of the failing step, or the
callbacks' next training forward) once a failure was seen.
"""

from __future__ import annotations

import contextlib
import math
import weakref

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode

from .hooks import ModuleHooks, float_tensors
from .replay import restore, snapshot

#: an input beyond this (fp16's range) that makes float32 fail too came from upstream: its producer is the cause
CAUSE_AMAX = 2.0**16
_BINARY = {"add", "sub", "mul", "truediv", "div", "matmul", "pow", "floordiv", "mod", "and", "or"}


def op_name(func) -> str:
    """A torch function's user-facing name: ``__matmul__`` -> matmul, ``__iadd__`` -> add_, ``__rmul__`` -> mul."""
    n = getattr(func, "__name__", None) or str(func)
    if n.startswith("__") and n.endswith("__"):
        n = n[2:-2]
        if n[:1] == "r" and n[1:] in _BINARY:
            n = n[1:]
        elif n[:1] == "i" and n[1:] in _BINARY:
            n = n[1:] + "_"
        n = {"truediv": "div", "truediv_": "div_"}.get(n, n)
    return n


def _amax(t: torch.Tensor) -> float:
    if t.numel() == 0:
        return 0.0
    return float(t.detach().abs().max().float())


class _Call:
    __slots__ = ("name", "in_amax", "out_amax", "source")

    def __init__(self, name: str, in_amax: float, source):
        self.name, self.in_amax, self.out_amax, self.source = name, in_amax, None, source


class OpTrace(ModuleHooks, TorchFunctionMode):
    """The op of a forward that made the inf/NaN that matters (see the module docstring).

    Use as a context manager around one forward of ``model``; afterwards :meth:`result` is None or
    ``{"name", "phase": "forward", "op", "in_reference", "inputs_amax", "reference_amax"[, "cause"],
    "recipient"}``; :attr:`origin` is the same without ``recipient``.
    """

    hook_kwargs = True  # its hooks read the forward's keyword arguments

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.candidates: list[dict] = []      # each op that made a non-finite value from finite inputs
        #: per module, the candidate of its first non-finite output (the value it received or made)
        self.reached: dict[str, int] = {}
        self.recipient: str | None = None     # the first module whose output held an inf/NaN
        self.ops = 0
        self._stack: list[str] = []
        self._calls: list[_Call] = []
        self._made: dict[int, tuple] = {}   # id(tensor) -> (weakref, index of the call that returned it)
        self._roots: dict[int, tuple] = {}  # id(non-finite tensor) -> (weakref, its candidate)
        self._out: int | None = None        # the candidate reaching the outermost call's output
        self._handles: list = []
        self._busy = False   # inside a hook: its own amaxes are not the model's ops

    # ------------------------------------------------------------------ modules
    def _producer(self, t: torch.Tensor):
        seen = self._made.get(id(t))
        return seen[1] if seen is not None and seen[0]() is t else None

    def _root(self, t: torch.Tensor):
        seen = self._roots.get(id(t))
        return seen[1] if seen is not None and seen[0]() is t else None

    def _pre(self, name: str):
        def hook(module, args, kwargs):
            self._busy = True
            try:
                self._enter(name, float_tensors((args, kwargs)))
            finally:
                self._busy = False
        return hook

    def begin(self, name: str, xs: list) -> None:
        """Start inside a module already entered (its pre-hooks ran before this trace existed)."""
        self._busy = True
        try:
            self._enter(name, xs)
        finally:
            self._busy = False

    def _enter(self, name: str, xs: list) -> None:
        if xs:
            amaxes = [_amax(x) for x in xs]
            big = xs[amaxes.index(max(amaxes))]
            self._calls.append(_Call(name, max(amaxes), self._producer(big)))
        else:
            self._calls.append(_Call(name, 0.0, None))
        self._stack.append(len(self._calls) - 1)

    def _post(self, name: str):
        def hook(module, args, *rest):   # (kwargs, output), or (output) once removed mid-call
            idx = self._stack.pop() if self._stack else None
            if idx is None:
                return
            self._busy = True
            try:
                outs = float_tensors(rest[-1])
                amaxes = [_amax(t) for t in outs]
                self._calls[idx].out_amax = max(amaxes, default=0.0)
                for t in outs:
                    self._made[id(t)] = (weakref.ref(t), idx)
                bad = [t for t, a in zip(outs, amaxes) if not math.isfinite(a)]
                if bad:
                    roots = [r for r in map(self._root, bad) if r is not None]
                    if self.recipient is None:
                        self.recipient = self._calls[idx].name
                    if roots:
                        self.reached.setdefault(self._calls[idx].name, min(roots))
                        if not self._stack:    # an outermost call: what reaches the loss
                            self._out = min(roots) if self._out is None else min(self._out, *roots)
            finally:
                self._busy = False
        return hook

    def _origin_index(self) -> int | None:
        return self._out if self._out is not None else self.reached.get(self.recipient)

    @property
    def origin(self) -> dict | None:
        """The candidate whose value reached the forward's output (what the loss is computed from), else
        the one that reached the recipient; None: no candidate reached a module's output."""
        idx = self._origin_index()
        return None if idx is None else self.candidates[idx]

    def result(self, recipient: str | None = None) -> dict | None:
        """The origin, with ``recipient``: the first module whose output held its value (what
        module-output hooks name). ``recipient`` given (the module a record saw fail first): the
        origin of the value that module held, None when its output stayed finite in this forward."""
        if recipient is None:
            idx = self._origin_index()
            recipient = next((n for n, r in self.reached.items() if r == idx), self.recipient)
        else:
            idx = self.reached.get(recipient)
        return None if idx is None else {**self.candidates[idx], "recipient": recipient}

    # ------------------------------------------------------------------ ops
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self._busy or not self._stack:
            return func(*args, **kwargs)
        name = op_name(func)
        inplace = name.endswith("_") and not name.startswith("_")
        before = [a.detach().clone() if inplace and i == 0 else a for i, a in enumerate(args)] if inplace else args
        out = func(*args, **kwargs)
        outs = float_tensors(out) if isinstance(out, (torch.Tensor, tuple, list)) else []
        if not outs:
            return out
        self.ops += 1
        bad = [t for t in outs if not bool(torch.isfinite(t).all())]
        if not bad:
            return out
        ins = float_tensors((list(before), kwargs))
        inherited = [r for t in ins if not bool(torch.isfinite(t).all()) for r in [self._root(t)] if r is not None]
        if inherited:   # a non-finite value passed on: its candidate goes with it
            root = min(inherited)
        else:
            # finite inputs (or non-finite ones made before this forward -- a parameter, the batch -- or by
            # an op not seen): a candidate, in the module where it first shows
            root = self._candidate(func, name, before, kwargs, ins)
        for t in bad:
            self._roots[id(t)] = (weakref.ref(t), root)
        return out

    def _candidate(self, func, name: str, before, kwargs, ins: list) -> int:
        call = self._calls[self._stack[-1]]
        bad, ref_amax = _in_float32(func, before, kwargs)
        found = {"name": call.name, "phase": "forward", "op": name, "in_reference": bad,
                 "inputs_amax": [_amax(t) for t in ins], "reference_amax": ref_amax}
        cause = self._cause(ins, call.name)
        if cause is not None and bad:
            found["cause"] = cause
        self.candidates.append(found)
        return len(self.candidates) - 1

    def _cause(self, ins: list[torch.Tensor], origin: str) -> dict | None:
        """The upstream module whose outputs grew to the op's largest input (when that input is beyond
        fp16's range): pass-through modules (outputs no larger than twice their input) are skipped."""
        if not ins:
            return None
        big = max(ins, key=_amax)
        amax = _amax(big)
        if not math.isfinite(amax) or amax <= CAUSE_AMAX:
            return None
        idx = self._producer(big)
        while idx is not None:
            c = self._calls[idx]
            if c.out_amax is not None and c.out_amax > 2 * c.in_amax or c.source is None:
                break
            idx = c.source
        if idx is None:
            return None
        c = self._calls[idx]
        if c.name == origin:
            return None
        return {"name": c.name,
                "why": f"its outputs reach {c.out_amax:.3g} from inputs of {c.in_amax:.3g}; {origin} receives "
                       f"them and fails in float32 too"}


def _in_float32(func, args, kwargs) -> tuple[bool, float | None]:
    """The op on its own inputs in float32, autocast off: (still non-finite, its output's amax); an op
    that refuses float32 inputs: (False, None), nothing claimed."""
    def up(a):
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            return a.detach().float()
        if isinstance(a, (list, tuple)):
            return type(a)(up(v) for v in a)
        return a

    xs = [up(a) for a in args]
    kw = {k: up(v) for k, v in kwargs.items()}
    dev = next((t.device for t in float_tensors((xs, kw))), torch.device("cpu"))
    try:  # a random op drawn again must not move the caller's generators (a callback traces a real forward)
        with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []), torch.no_grad(), \
                torch.autocast(dev.type, enabled=False):
            outs = float_tensors(func(*xs, **kw))
    except Exception:
        return False, None
    if not outs:
        return False, None
    bad = any(not bool(torch.isfinite(t).all()) for t in outs)
    return bad, (math.inf if bad else max(_amax(t) for t in outs))


@contextlib.contextmanager
def tracing(model: nn.Module):
    """``with tracing(model) as trace: model(x)`` -- then ``trace.origin``."""
    trace = OpTrace(model)
    with trace:
        yield trace


def refine(first: dict | None, traced: dict | None) -> dict | None:
    """The module-level ``first`` ({"name", "phase", ...}) told by a traced replay: a forward origin
    found by the trace replaces the name (the module that made the inf/NaN, not the one that received
    it) and adds ``op``, ``in_reference`` and any ``cause``; otherwise ``op`` is None."""
    if first is None:
        return None
    out = {**first}
    out.setdefault("op", None)
    out.setdefault("in_reference", False)
    if traced is not None and first.get("phase") == "forward":
        out.update(name=traced["name"], op=traced["op"], in_reference=bool(traced["in_reference"]),
                   inputs_amax=traced.get("inputs_amax"), reference_amax=traced.get("reference_amax"))
        seen = traced.get("recipient") or first.get("name")
        if seen != traced["name"]:
            out["received_by"] = seen
        if traced.get("cause"):
            out["cause"] = traced["cause"]
    return out


def run_traced(model: nn.Module, forward) -> OpTrace | None:
    """Run ``forward()`` (a replay of one step's forward, set up by the caller: autocast, the same
    random numbers) under :class:`OpTrace`, without gradients; the buffers it updates (BatchNorm's
    running statistics) are put back. The trace (ask it :meth:`OpTrace.result`), or None when the
    replay raised (it tells nothing more than the module-level record)."""
    saved = snapshot(model)
    trace = OpTrace(model)
    try:
        with torch.no_grad(), trace:
            forward()
    except Exception:
        return None
    finally:
        restore(saved)
    return trace


def trace_forward(model: nn.Module, forward, recipient: str | None = None) -> dict | None:
    """:func:`run_traced`'s origin (of the value ``recipient`` held, when given: see
    :meth:`OpTrace.result`), or None (the replay stayed finite, or raised)."""
    trace = run_traced(model, forward)
    return None if trace is None else trace.result(recipient)


def trace_calls(model: nn.Module, calls) -> OpTrace | None:
    """One trace over a step's held forwards (a :class:`.replay.StepCalls`), replayed in order."""
    held = list(calls.calls)
    if not held:
        return None

    def forward():
        for call in held:
            calls.replay(call)
    return run_traced(model, forward)


def step_origin(model: nn.Module, first: dict | None, run, replay, reference_engine) -> dict | None:
    """The audit's first inf/NaN of one measured step (``run``: its ``_StepRun``), told by traced
    replays: the audited forward's (``replay(run.mp)``) names the module and op that made it; when
    the fp32 reference's forward is non-finite too, a replay of it (``replay(reference_engine)``)
    names where float32 fails and the upstream cause. ``in_reference``: the fp32 reference is
    non-finite at the origin (forward) or in its gradients (backward)."""
    if first is None:
        return None
    ref_bad = [k[0] for k, v in run.ref_fwd.items() if any(not math.isfinite(st[0]) for st in v)]
    traced = trace_forward(model, lambda: replay(run.mp)) if first["phase"] == "forward" else None
    out = refine(first, traced)
    if first["phase"] == "backward":
        out["in_reference"] = any(not math.isfinite(st[0]) for v in run.ref_grad.values() for st in v)
    else:
        out["in_reference"] = bool(out["in_reference"] or out["name"] in ref_bad)
    if ref_bad and not out.get("cause"):
        ref = trace_forward(model, lambda: replay(reference_engine))
        if ref is not None:
            if ref["name"] != out["name"]:
                out["reference_origin"] = {"name": ref["name"], "op": ref["op"]}
            if ref.get("cause"):
                out["cause"] = ref["cause"]
    return out
