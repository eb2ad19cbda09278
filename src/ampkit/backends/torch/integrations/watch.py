"""The torch watch of the trainer callbacks: per-module forward amax and gradient norms kept on the
device, the trainer's own loss scale read as a device tensor, all read back at once.

Per optimizer step it writes one row of a small device tensor (the ring): each module's output
amax (a forward hook, one reduction kernel per module call, training mode only), each
parameter-holding module's gradient norm (one ``torch._foreach_norm`` over the gradients and one
``index_add_``), the loss, the scale the step ran with and the scale after the scaler's update (the
trainer's own ``GradScaler._scale``; a step was skipped exactly when the update lowered the scale:
GradScaler's backoff factor is < 1). Nothing is read on the host during a step: the rows are read
in one ``tolist()`` every ``read_every`` steps (on a CPU, where reading costs nothing, every step; on a
GPU at the trainer's own logging cadence, at most 32 steps) and at the end, and handed to the
framework-neutral :class:`~ampkit.integrations.record.TrainRecord` in order. The ring holds
``k + read_every`` rows, so the K steps before a failure are still there when it is read.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ....integrations.record import StepRow, TrainRecord

__all__ = ["TorchWatch", "first_tensor", "scheduler_counters"]

_INF = float("inf")


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
        self._handles: list = []
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
        self.n, self.ng = len(self._mods), len(self._gmods)
        self.cols = self.n + self.ng + 3       # fwd amax | grad norm | loss, scale used, scale after
        if self.read_every is None:
            self.read_every = 1 if self.device.type == "cpu" else 32
        self.rows = self.k + int(self.read_every)
        self._ring = torch.full((self.rows, self.cols), -1.0, device=self.device)
        self._r = 0
        self._seen = [False] * self.n
        self._loss = [False] * self.rows
        self._pending: list[tuple[int, int, tuple]] = []   # (step, row, scheduler counters)
        self._idx_cache: dict[tuple, torch.Tensor] = {}
        self._sched: tuple = ()
        self._used = False                      # the scale used was written by grads()
        self._prev_after = None                 # the scale after the last update (what the next step uses)
        for i, (_n, m) in enumerate(self._mods):
            self._handles.append(m.register_forward_hook(self._hook(i)))

    def detach(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def _hook(self, i: int):
        def hook(module, _inputs, output):
            if not module.training:
                return
            if i == 0:
                loss = output.get("loss") if isinstance(output, dict) else None
                if isinstance(loss, torch.Tensor) and loss.numel() == 1:
                    self.set_loss(loss)
            t = first_tensor(output)
            if t is None or t.numel() == 0:
                return
            if i not in self._pos:
                self._pos[i] = len(self._pos)
                if self.autocast is None and i != 0:
                    dev = t.device.type
                    on = torch.is_autocast_enabled(dev)
                    self.autocast = (on, torch.get_autocast_dtype(dev) if on else None)
            a = torch.linalg.vector_norm(t.detach(), _INF)
            row = self._ring[self._r]
            if self._seen[i]:
                row[i] = torch.maximum(row[i], a.to(row.dtype))
            else:
                self._seen[i] = True
                row[i] = a
        return hook

    def set_loss(self, loss: torch.Tensor) -> None:
        self._ring[self._r, self.n + self.ng] = loss.detach().reshape(())
        self._loss[self._r] = True

    # ------------------------------------------------------------------ per step
    def grads(self, scaler=None, schedulers=(), *, grad_scale: torch.Tensor | None = None) -> None:
        """The gradient norms of this step (unscaled: pass ``grad_scale`` when the gradients still
        hold the loss scale) and the scheduler counters before its scheduler step."""
        row = self._ring[self._r]
        present = tuple(p.grad is not None and not p.grad.is_sparse for p in self._params)
        if any(present):
            grads = [p.grad.detach() for p, ok in zip(self._params, present) if ok]
            idx = self._idx_cache.get(present)
            if idx is None:
                idx = torch.tensor([self._pmod[j] for j, ok in enumerate(present) if ok], device=self.device)
                self._idx_cache[present] = idx
            norms = torch.stack([n.to(self.device, torch.float32) for n in torch._foreach_norm(grads)])
            sq = torch.zeros(self.ng, device=self.device).index_add_(0, idx, norms * norms).sqrt_()
            if grad_scale is not None:
                sq = sq / grad_scale.to(self.device, torch.float32)
            row[self.n:self.n + self.ng] = sq
        self._sched = scheduler_counters(schedulers)
        scale = self._scale_of(scaler)
        if scale is not None:
            row[self.n + self.ng + 1] = scale
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
                row[self.n + self.ng + 1] = self._prev_after
            row[self.n + self.ng + 2] = scale
            self._prev_after = scale.clone() if isinstance(scale, torch.Tensor) else scale
        self._used = False
        self.steps += 1
        self._pending.append((self.steps, self._r, self._sched))
        self._r = (self._r + 1) % self.rows
        self._ring[self._r].fill_(-1.0)
        self._loss[self._r] = False
        self._seen = [False] * self.n
        if len(self._pending) >= self.read_every:
            self.flush()

    @staticmethod
    def _scale_of(scaler):
        if scaler is None or not getattr(scaler, "is_enabled", lambda: False)():
            return None
        s = getattr(scaler, "_scale", None)
        return s.reshape(()) if isinstance(s, torch.Tensor) else float(getattr(scaler, "_init_scale", 1.0))

    def flush(self) -> None:
        """Read the pending rows (one device read) and hand them to the record in order."""
        if not self._pending:
            return
        rows = [r for _s, r, _c in self._pending]
        data = self._ring[torch.tensor(rows, device=self.device)].tolist()
        order = sorted(self._pos, key=self._pos.get)
        self.record.set_modules([(self._mods[i][0], type(self._mods[i][1]).__name__) for i in order],
                                self._grad_names(order))
        gorder = self._grad_order(order)
        n, ng = self.n, self.ng
        for (step, r, sched), vals in zip(self._pending, data):
            fwd = [None if vals[i] < 0 else vals[i] for i in order]
            grad = [None if vals[n + j] < 0 else vals[n + j] for j in gorder]
            used, after = vals[n + ng + 1], vals[n + ng + 2]
            scaled = after >= 0 and used >= 0
            self.record.add(StepRow(step, vals[n + ng] if self._loss[r] else None, fwd, grad,
                                    used if scaled else None, after if scaled else None,
                                    bool(scaled and after < used), sched))
        self._pending = []

    def _grad_order(self, order: list[int]) -> list[int]:
        """Grad-module positions in execution order (modules that never ran last)."""
        rank = {i: k for k, i in enumerate(order)}
        return sorted(range(self.ng), key=lambda j: rank.get(self._gmods[j], math.inf))

    def _grad_names(self, order: list[int]) -> list[str]:
        return [self._mods[self._gmods[j]][0] for j in self._grad_order(order)]

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
