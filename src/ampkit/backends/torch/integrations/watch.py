"""The torch watch of the trainer callbacks: per-module forward amax and gradient norms kept on the
device, the trainer's own loss scale read as a device tensor, all read back at once.

Per optimizer step it writes one row of a small device tensor (the ring): each module's output
amax (a forward hook, one reduction kernel per module call, training mode only), each
parameter-holding module's gradient norm (one ``torch._foreach_norm`` over the gradients and one
``index_add_``), the loss, the scale the step ran with and the scale after the scaler's update (the
trainer's own GradScaler's scale tensor, read by :mod:`..engine.scaler_state`; a step was skipped
exactly when the update lowered the scale: GradScaler's backoff factor is < 1). Nothing is read on the host during a step: the rows are read
in one ``tolist()`` every ``read_every`` steps (on a CPU, where reading costs no sync, every 4 steps; on a
GPU at the trainer's own logging cadence, at most 32 steps) and at the end, and handed to the
framework-neutral :class:`~ampkit.integrations.record.TrainRecord` in order. The ring holds
``k + read_every`` rows, so the K steps before a failure are still there when it is read."""

from __future__ import annotations

import math
from typing import Any

import torch

from ....integrations.record import StepRow, TrainRecord
from ..engine.scaler_state import enabled, initial_scale, scale_tensor

__all__ = ["TorchWatch", "first_tensor", "scheduler_counters"]

#: modules whose output cannot go non-finite where their input is finite (dropout scales by 1/(1-p))
_PASS_THROUGH = (torch.nn.modules.dropout._DropoutNd, torch.nn.Identity)


def first_tensor(out: Any) -> torch.Tensor | None:
    """The first floating-point tensor of a module's output (a tensor, a tuple, a dict/ModelOutput)."""
    if isinstance(out, torch.Tensor):
        return out if out.is_floating_point() else None
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        for v in out:
            if isinstance(v, torch.Tensor) and v.is_floating_point():
                return v
    return None


def scheduler_counters(scheds) -> tuple:
    """Each scheduler's step counter (``last_epoch``; host ints, no device read)."""
    out = []
    for s in scheds or ():
        s = getattr(s, "scheduler", s)   # accelerate's AcceleratedScheduler, Lightning's config
        n = getattr(s, "last_epoch", None)
        if isinstance(n, int):
            out.append(n)
    return tuple(out)


class TorchWatch:
    """Hooks one model; ``grads(...)`` before (or right after) each optimizer step and
    ``end_step(...)`` after it; ``flush()`` to read what is pending; ``detach()`` at the end."""

    def __init__(self, record: TrainRecord, *, k: int = 8, read_every: int | None = None) -> None:
        self.record, self.k, self.read_every = record, int(k), read_every
        self.model: torch.nn.Module | None = None
        self._handles: dict = {}
        self._held = None                       # this step's forwards, for a replay (hold_steps)
        self._step_trace = None                 # (step, trace) of the first step that failed
        self.autocast: tuple[bool, torch.dtype | None] | None = None   # seen in the first training forward
        self.steps = 0

    # ------------------------------------------------------------------ set-up
    def attach(self, model: torch.nn.Module) -> None:
        if self.model is model:
            return
        self.detach()
        self.model = model
        self._mods = list(model.named_modules())
        self._pos: dict[int, int] = {}          # module index -> execution position
        self._params: list[torch.nn.Parameter] = []
        self._pmod: list[int] = []              # each parameter's grad-module index
        self._gmods: list[int] = []             # grad modules (module indices)
        for i, (_n, m) in enumerate(self._mods):
            own = [p for p in m.parameters(recurse=False) if p.requires_grad]
            if own:
                for p in own:
                    self._params.append(p)
                    self._pmod.append(len(self._gmods))
                self._gmods.append(i)
        p0 = next(iter(model.parameters()), None)
        self.device = p0.device if p0 is not None else torch.device("cpu")
        self.n, self.np_, self.ng = len(self._mods), len(self._params), len(self._gmods)
        self.cols = self.n + self.np_ + 3       # fwd amax | grad norm per parameter | loss, scale used, scale after
        if self.read_every is None:
            self.read_every = 4 if self.device.type == "cpu" else 32
        self.rows = self.k + int(self.read_every)
        self._ring = torch.full((self.rows, self.cols), -1.0, device=self.device)
        self._r = 0
        # per output dtype, (lo, hi) of each module written in place by aminmax(out=...)
        self._bufs: dict[torch.dtype, torch.Tensor] = {}
        self._vlist: list = [None] * self.n    # per module: (dtype, (lo, hi) views into its buffer)
        self._stamp = [0] * self.n              # the step a module last wrote in (a second call takes the max)
        self._cur = 1                           # the step being run (1-based)
        self._ran: list = [None] * self.rows    # per row: (its step, the stamps then)
        self._named = -1                        # modules known to the record (re-sent when more ran)
        self._loss = [False] * self.rows
        self._pending: list[tuple[int, int, tuple]] = []   # (step, row, scheduler counters)
        self._sched: tuple = ()
        self._used = False                      # the scale used was written by grads()
        self._prev_after = None                 # the scale after the last update (what the next step uses)
        self._alias: dict | None = {}           # first step: id -> each output measured
        self._handles = {i: m.register_forward_hook(self._hook(i)) for i, (_n, m) in enumerate(self._mods)
                         if i == 0 or not isinstance(m, _PASS_THROUGH)}

    def detach(self) -> None:
        for h in self._handles.values():
            h.remove()
        self._handles = {}
        if getattr(self, "_tracer", None) is not None:
            self._tracer.remove()
        if getattr(self, "_held", None) is not None:
            self._held.remove()
            self._held = None

    def hold_steps(self, modules) -> None:
        """Hold each step's outermost training forwards through ``modules`` (see docs/internals.md)."""
        from ..numerics.replay import StepCalls

        self._held = StepCalls(modules)

    def _check_step(self, row: torch.Tensor) -> None:
        """A step whose module outputs went non-finite (and its loss or gradients with them: a value the
        model discards is no failure) is replayed under the op-level trace now, once per run."""
        held = self._held
        if held is None:
            return
        n = self.n
        fin = torch.isfinite(row[:n + self.np_ + 1])   # forward amaxes | gradient norms | loss
        if bool(fin[:n].all()):   # one read of the device, free here: a CPU, or a trainer that reads one every step anyway
            return
        if self._loss[self._r] and bool(fin[n:].all()):   # loss and gradients finite: it did not matter
            return
        from ..numerics.origin import trace_calls

        trace = trace_calls(self.model, held)   # the watch's own hooks stay quiet while it replays
        self._held, self._step_trace = None, (self._cur, trace)
        held.remove()

    def _explain(self, step: int) -> None:
        """The first failure's origin: the trace of its own step where one was made, else the next
        training forward's (issue #34; nothing before a failure)."""
        first = self.record.first
        done, self._step_trace = self._step_trace, None
        if done is not None and done[0] == step and done[1] is not None:
            origin = done[1].result(first["name"])
            if origin is not None:
                self.record.locate_origin({**origin, "traced": "failing step"})
                return
        from ..numerics.next_forward import NextForwardTrace

        self._tracer = NextForwardTrace(self.model, lambda o: self.record.locate_origin(
            None if o is None else {**o, "traced": "next forward"}), recipient=first["name"])

    def _hook(self, i: int):
        aminmax, tensor, stamp, views = torch.aminmax, torch.Tensor, self._stamp, self._vlist

        def hook(module, _inputs, output):
            if not module.training or self._held is not None and self._held.replaying:
                return
            t = output if type(output) is tensor else self._unpack(i, output)
            if t is None:
                return
            v = views[i]
            if v is None or v[0] is not t.dtype:
                v = self._first(i, t)
                if v is None:
                    return
            if stamp[i] != self._cur:
                stamp[i] = self._cur
                aminmax(t.detach(), out=v[1])
            else:                              # called again in this step: keep the extremes
                lo, hi = aminmax(t.detach())
                torch.minimum(v[1][0], lo, out=v[1][0])
                torch.maximum(v[1][1], hi, out=v[1][1])
        return hook

    def _unpack(self, i: int, output):
        if i == 0 and isinstance(output, dict):
            loss = output.get("loss")
            if isinstance(loss, torch.Tensor) and loss.numel() == 1:
                self.set_loss(loss)
        return first_tensor(output)

    def _first(self, i: int, t: torch.Tensor):
        """A module's first output (or its first in another dtype): (dtype, (lo, hi) views)."""
        if not t.is_floating_point() or t.numel() == 0:
            return None
        if i not in self._pos and not self._seen_new(i, t):
            return None
        buf = self._bufs.get(t.dtype)
        if buf is None:
            buf = self._bufs[t.dtype] = torch.zeros(2, self.n, dtype=t.dtype, device=t.device)
        for other in self._bufs.values():      # a module that changed dtype leaves no stale value
            if other is not buf:
                other[:, i].zero_()
        v = self._vlist[i] = (t.dtype, (buf[0, i], buf[1, i]))
        return v

    def _seen_new(self, i: int, t: torch.Tensor) -> bool:
        """A module's first output. In the first step, a container that returns the very tensor one
        of its children returned (a Sequential, a BERT layer) tells nothing more: its hook goes
        (the root's stays: it carries the loss; a leaf stays: it may pass its input on only for
        now). False: do not measure it."""
        if self._alias is not None:       # kept alive in the first step, so an id is never reused
            if id(t) in self._alias and i != 0 and next(self._mods[i][1].children(), None) is not None:
                self._handles.pop(i).remove()
                return False
            self._alias[id(t)] = t
        self._pos[i] = len(self._pos)
        if self.autocast is None and i != 0:
            dev = t.device.type
            on = torch.is_autocast_enabled(dev)
            self.autocast = (on, torch.get_autocast_dtype(dev) if on else None)
        return True

    def _forward_row(self, row: torch.Tensor) -> None:
        """This step's forward amax into the row: max |x| = max(|lo|, |hi|), two kernels per output
        dtype; which modules ran is kept on the host (their stamps)."""
        fwd = row[:self.n]
        for k, buf in enumerate(self._bufs.values()):
            amax = buf.abs().amax(0)
            if k == 0:
                fwd.copy_(amax)
            else:
                torch.maximum(fwd, amax.to(fwd.dtype), out=fwd)
        self._ran[self._r] = (self._cur, list(self._stamp))

    def set_loss(self, loss: torch.Tensor) -> None:
        self._ring[self._r, self.n + self.np_] = loss.detach().reshape(())
        self._loss[self._r] = True

    # ------------------------------------------------------------------ per step
    def grads(self, scaler=None, schedulers=(), *, grad_scale: torch.Tensor | None = None) -> None:
        """The gradient norms of this step (unscaled: pass ``grad_scale`` when the gradients still
        hold the loss scale) and the scheduler counters before its scheduler step."""
        row = self._ring[self._r]
        self._alias = None                      # containers are known after the first step
        self._forward_row(row)
        grads = [p.grad for p in self._params]
        gcols = row[self.n:self.n + self.np_]
        if any(g is None or g.is_sparse for g in grads):
            for j, g in enumerate(grads):      # some parameters have no (dense) gradient: one at a time
                if g is not None and not g.is_sparse:
                    gcols[j] = torch.linalg.vector_norm(g.detach()).to(row.dtype)
        elif grads:
            gcols.copy_(torch.stack(torch._foreach_norm(grads)))
        if grad_scale is not None:
            gcols.div_(grad_scale.to(row.device, row.dtype))
        self._sched = scheduler_counters(schedulers)
        self._check_step(row)
        scale = self._scale_of(scaler)
        if scale is not None:
            row[self.n + self.np_ + 1] = scale
            self._used = True

    def prev_scale_from(self, scaler) -> None:
        """Where ``grads`` runs after the scaler's update (Fabric's hook): the first step's scale."""
        self._prev_after = self._scale_of(scaler)

    def end_step(self, scaler=None) -> None:
        """After the optimizer step (and the scaler's update): the scale after, then the next row."""
        scale = self._scale_of(scaler)
        row = self._ring[self._r]
        if scale is not None:
            if not self._used and self._prev_after is not None:
                row[self.n + self.np_ + 1] = self._prev_after
            row[self.n + self.np_ + 2] = scale
            self._prev_after = scale.clone() if isinstance(scale, torch.Tensor) else scale
        self._used = False
        if self._held is not None:
            self._held.clear()
        self.steps += 1
        self._cur = self.steps + 1
        self._pending.append((self.steps, self._r, self._sched))
        self._r = (self._r + 1) % self.rows
        self._ring[self._r].fill_(-1.0)
        self._loss[self._r] = False
        if len(self._pending) >= self.read_every:
            self.flush()

    @staticmethod
    def _scale_of(scaler):
        if not enabled(scaler):
            return None
        s = scale_tensor(scaler)
        return s.reshape(()) if isinstance(s, torch.Tensor) else initial_scale(scaler)

    def flush(self) -> None:
        """Read the pending rows (one device read) and hand them to the record in order."""
        if not self._pending:
            return
        rows = [r for _s, r, _c in self._pending]
        data = self._ring[torch.tensor(rows, device=self.device)].tolist()
        if self._named != len(self._pos):
            self._named = len(self._pos)
            self._order = order = sorted(self._pos, key=self._pos.get)
            self._gorder = self._grad_order(order)
            self.record.set_modules([(self._mods[i][0], type(self._mods[i][1]).__name__) for i in order],
                                    [self._mods[self._gmods[j]][0] for j in self._gorder])
        order, gorder = self._order, self._gorder
        n, np_ = self.n, self.np_
        for (step, r, sched), vals in zip(self._pending, data):
            cur, stamps = self._ran[r] or (0, [])
            fwd = [vals[i] if stamps and stamps[i] == cur else None for i in order]
            sq = [None] * self.ng                # per module: the norm of its parameters' gradients
            for j, m in enumerate(self._pmod):
                v = vals[n + j]
                if v >= 0 or v != v:             # a norm (NaN counts; -1 is "no gradient")
                    sq[m] = v * v + (sq[m] or 0.0)
            grad = [None if sq[j] is None else math.sqrt(sq[j]) for j in gorder]
            used, after = vals[n + np_ + 1], vals[n + np_ + 2]
            scaled = after >= 0 and used >= 0
            if self.record.add(StepRow(step, vals[n + np_] if self._loss[r] else None, fwd, grad,
                                       used if scaled else None, after if scaled else None,
                                       bool(scaled and after < used), sched)) and self.record.first["phase"] == "forward":
                self._explain(step)
        self._pending = []

    def _grad_order(self, order: list[int]) -> list[int]:
        """Grad-module positions in execution order (modules that never ran last)."""
        rank = {i: k for k, i in enumerate(order)}
        return sorted(range(self.ng), key=lambda j: rank.get(self._gmods[j], math.inf))

    # ------------------------------------------------------------------ what runs
    def observed_mode(self, scaler=None) -> tuple[str, bool]:
        """("fp16"|"bf16"|"fp32", a loss scaler is active), as the first training forward showed."""
        on, dtype = self.autocast or (False, None)
        scaling = self._scale_of(scaler) is not None
        if on and dtype in (torch.float16, torch.bfloat16):
            return ("fp16" if dtype == torch.float16 else "bf16"), scaling
        p0 = next(iter(self.model.parameters()), None) if self.model is not None else None
        if p0 is not None and p0.dtype in (torch.float16, torch.bfloat16):
            return ("fp16" if p0.dtype == torch.float16 else "bf16"), scaling
        return "fp32", scaling
