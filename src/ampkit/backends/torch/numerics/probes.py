"""Device-side probes of one audited step: per-module statistics of the fp32 reference and the
audited pass (:class:`StepProbe`), and the error each flagged module receives (:class:`InputProbe`)."""

from __future__ import annotations

import math
import weakref

import torch
import torch.nn as nn

from ....compare import relative_error
from ....formats import FloatFormat, lost_below
from ..engine import MixedPrecision
from .hooks import float_tensors


class StepProbe:
    """Device-side statistics for one run of one step: few kernels per tensor, one transfer.

    Every statistic is a 0-d tensor appended to one flat list; :meth:`host` stacks it and pulls
    it in a single transfer (one host-device sync per run), then derives the rest on the host.

    Reference run (fp32): per output and per output-gradient amax, nonzero count and the count
    below the smallest normal (gradients judged at the loss scale: |g| < normal / scale), plus
    each output's norm. Audited run: per output a probe (a float32 sum, non-finite exactly when
    some element is; isfinite is several times slower on CPUs) and its distance to the
    reference; per gradient tensor one probe, shared by every module the tensor belongs to.
    With ``exact`` the probes are inf/NaN counts (the re-run after a non-finite fast pass).
    """

    def __init__(self, fmt: FloatFormat, scale: float, reference: StepProbe | None, exact: bool = False):
        self.fmt, self.scale, self.reference, self.exact = fmt, scale, reference, exact
        self._vals: list[torch.Tensor] = []
        self._fwd: dict = {}      # key -> [(kind-specific record)]
        self._grad: dict = {}
        self._events: list = []   # (key, kind, tensor id, index of the probe)
        self._by_tid: dict = {}   # tensor id -> index of its gradient probe
        self.outputs: dict = {}   # reference outputs kept for the distance
        self.norms: dict = {}     # key -> [norm of each reference output] (host floats after host())
        self.sizes: dict = {}     # key -> [element count of each reference output]
        self._clones: dict = {}   # id(output) -> (weakref, in-place version, float32 copy)
        self.dtypes: dict = {}    # module name -> dtypes of its outputs in this run
        self._saw = False

    def _clone(self, t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """A copy of ``x`` (``t`` as float32) as it is now, shared by every module that returns the
        same unchanged tensor (a container passing on its last child's output, HF tuples): the
        same live object at the same in-place version is the same values."""
        seen = self._clones.get(id(t))
        if seen is not None and seen[0]() is t and seen[1] == t._version:
            return seen[2]
        kept = x.clone()
        self._clones[id(t)] = (weakref.ref(t), t._version, kept)
        return kept

    def _put(self, *tensors: torch.Tensor) -> int:
        self._vals.extend(tensors)
        return len(self._vals) - len(tensors)

    def _magnitudes(self, x: torch.Tensor, scale: float) -> tuple[int, int]:
        """amax, nonzero count, count below the smallest normal and below :func:`lost_below`, the
        last two for ``x * scale`` (zeros included: :meth:`host` takes them out)."""
        a = x.abs()
        amax = a.max() if a.numel() else a.new_zeros(())
        under, lost = self.fmt.smallest_normal / scale, lost_below(self.fmt) / scale
        return self._put(amax.float(), torch.count_nonzero(a).float(), torch.count_nonzero(a < under).float(),
                         torch.count_nonzero(a < lost).float()), a.numel()

    def _probe(self, x: torch.Tensor) -> torch.Tensor:
        if self.exact:
            return (x.numel() - torch.isfinite(x).sum()).float()
        return x.sum(dtype=torch.float32)

    def on_forward(self, key, tensors) -> None:
        if not tensors:
            return
        self.dtypes.setdefault(key[0], set()).update(str(t.dtype).removeprefix("torch.") for t in tensors)
        if self.reference is None:
            for t in tensors:
                x = t.detach().float()
                # keep a copy as produced: a later in-place op (ReLU(inplace=True), `out += identity`)
                # changes the module's output tensor, and .detach()/.float() share its storage
                kept = self._clone(t, x)
                self._fwd.setdefault(key, []).append(self._magnitudes(kept, 1.0))
                self.outputs.setdefault(key, []).append(kept)
                self.sizes.setdefault(key, []).append(kept.numel())
                self.norms.setdefault(key, []).append(self._put(torch.linalg.vector_norm(kept)))
            return
        ref = self.reference.outputs.get(key, [])
        for i, t in enumerate(tensors):
            x = t.detach()
            same = i < len(ref) and ref[i].shape == x.shape
            dist = torch.linalg.vector_norm(x.float() - ref[i]) if same else None
            idx = self._put(self._probe(x), dist) if same else self._put(self._probe(x))
            self._fwd.setdefault(key, []).append((idx, i if same else None))

    def on_grad(self, key, kind, grad, tid) -> None:
        g = grad.detach()
        if self.reference is None:  # reference: magnitudes of output gradients only
            if kind == "output":
                self._grad.setdefault(key, []).append(self._magnitudes(g.float(), self.scale))
            return
        idx = self._by_tid.get(tid)
        if idx is None:  # one probe per gradient tensor, however many modules it belongs to
            idx = self._by_tid[tid] = self._put(self._probe(g))
        self._events.append((key, kind, tid, idx))
        if kind == "output":
            self._grad.setdefault(key, []).append(idx)

    @property
    def saw_nonfinite(self) -> bool:
        """After host(): whether the fast pass saw an inf/NaN (then the step is re-run exactly)."""
        return self._saw

    def _bad(self, v: float) -> float:
        return v if self.exact else (0.0 if math.isfinite(v) else 1.0)

    def host(self) -> tuple[dict, dict, list]:
        """One transfer to the host per run (a host-device sync, once per run of an audited step)."""
        flat = torch.stack(self._vals).tolist() if self._vals else []
        if self.reference is None:
            def mags(recs):
                return [[flat[i], flat[i + 1], flat[i + 2] - (n - flat[i + 1]), flat[i + 3] - (n - flat[i + 1])]
                        for i, n in recs]
            self.norms = {k: [flat[i] for i in v] for k, v in self.norms.items()}
            return ({k: mags(v) for k, v in self._fwd.items()}, {k: mags(v) for k, v in self._grad.items()}, [])
        norms = self.reference.norms
        fwd = {}
        for key, recs in self._fwd.items():
            rows = []
            for idx, ref_i in recs:
                bad = self._bad(flat[idx])
                if ref_i is None:
                    rows.append([bad])
                else:
                    rows.append([bad, relative_error(flat[idx + 1], norms[key][ref_i], self.reference.sizes[key][ref_i],
                                                     self.fmt)])
            fwd[key] = rows
        grad = {k: [[self._bad(flat[i])] for i in v] for k, v in self._grad.items()}
        events = [(k, kind, tid, self._bad(flat[i]) > 0) for k, kind, tid, i in self._events]
        self._saw = any(e[3] for e in events) or any(r[0] > 0 for v in fwd.values() for r in v)
        return fwd, grad, events


class InputProbe:
    """The error each candidate module *receives*: its floating inputs in the audited pass against
    the fp32 reference's. Run only when some leaf's output error is large for the format (forward
    passes only, no gradients), so that a module that merely passes on an error made upstream is
    not told to run in float32."""

    def __init__(self, model: nn.Module, names: set[str], fmt: FloatFormat):
        self.model, self.names, self.fmt = model, names, fmt
        self.kept: dict = {}
        self.errors: dict[str, float] = {}

    def _hook(self, name: str, reference: bool, calls: dict):
        def hook(module, args):
            idx = calls[name] = calls.get(name, -1) + 1
            xs = float_tensors(args)
            if reference:
                self.kept[(name, idx)] = [x.detach().float().clone() for x in xs]
                return
            refs = self.kept.get((name, idx), [])
            worst = 0.0
            for x, r in zip(xs, refs):
                if x.shape == r.shape:
                    dist = float(torch.linalg.vector_norm(x.detach().float() - r))
                    worst = max(worst, relative_error(dist, float(torch.linalg.vector_norm(r)), r.numel(), self.fmt))
            self.errors[name] = max(self.errors.get(name, 0.0), worst)
        return hook

    def run(self, workload, batch, mp: MixedPrecision, reference: bool) -> None:
        calls: dict = {}
        handles = [m.register_forward_pre_hook(self._hook(n, reference, calls))
                   for n, m in self.model.named_modules() if n in self.names]
        try:
            with torch.no_grad(), mp.autocast():
                workload.loss(batch)
        finally:
            for h in handles:
                h.remove()
