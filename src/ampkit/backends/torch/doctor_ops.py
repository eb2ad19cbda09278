"""The ops doctor times for PyTorch that need no engine: kernels in a mode's math, the small models
of its training steps, the one-thread measuring scope, and the quick check behind ``auto``.

Kept apart from :mod:`.doctor_work` (which trains through ``ampkit.MixedPrecision``) so that
:func:`.devices.resolve_auto` can measure with the doctor's own code without importing the engine
(the engine imports ``devices``).
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...precision import get_precision
from ...rounds import Work
from ...threads import DEFAULT_CPU
from .tf32 import tf32_scope
from .timing import clock_for

#: the quick check's sizes: a matmul an emulated bf16 does in tens of milliseconds, and the doctor's
#: CPU transformer block (timed only when the matmul already showed real bf16 instructions)
QUICK_MATMUL_N = 256
QUICK_BLOCK = (8, 64, 256)


@contextlib.contextmanager
def measuring_threads(device: torch.device, threads: int | None = DEFAULT_CPU):
    """Time on ``threads`` CPU threads, restored after (:mod:`ampkit.threads`: one by default on a
    CPU: the ratio of per-core speeds is what a mode changes, and on a shared CPU a multi-threaded
    step waits at every barrier for a descheduled thread; measured on a busy 2-core machine: the
    same step took 1.7 ms on one thread and 300 ms on two). None: the count stays (a GPU run
    for which none was asked, :func:`ampkit.threads.resolve`)."""
    if threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def mode_dtype(mode: str) -> torch.dtype:
    p = get_precision(mode)
    return getattr(torch, p.compute_dtype) if p.autocast else torch.float32


def _in_mode(mode: str, fn):
    tf32 = get_precision(mode).tf32

    def call():
        with tf32_scope(tf32):
            return fn()
    return call


def matmul_op(mode: str, device: torch.device, n: int) -> tuple:
    """(callable, flops per call): an ``n``-square matmul in the mode's math (inputs in its dtype)."""
    if mode == "fp8":  # a scaled e4m3 matmul; fp8 is reported, not trained with
        a8 = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
        b8 = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
        one = torch.tensor(1.0, device=device)
        return (lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)), 2.0 * n**3
    dtype = mode_dtype(mode)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    return _in_mode(mode, lambda: torch.mm(a, b)), 2.0 * n**3


def conv_op(mode: str, device: torch.device, shape: tuple) -> tuple:
    """(callable, flops per call): a 3x3 convolution ``(batch, c_in, h, w, c_out)`` in the mode's math."""
    dtype = mode_dtype(mode)
    bs, cin, h, w, cout = shape
    x = torch.randn(bs, cin, h, w, device=device, dtype=dtype)
    k = torch.randn(cout, cin, 3, 3, device=device, dtype=dtype)
    if device.type == "cuda":
        x, k = x.to(memory_format=torch.channels_last), k.to(memory_format=torch.channels_last)
    return _in_mode(mode, lambda: F.conv2d(x, k, padding=1)), 2.0 * bs * cout * cin * 9 * h * w


class PlainSGD:
    """Plain SGD (``p -= lr * grad``) with what the engine and ``torch.amp.GradScaler`` ask of an
    optimizer: ``param_groups``, ``step()``, ``zero_grad(set_to_none=True)`` and step post-hooks.

    Why not ``torch.optim.SGD``: a process's first torch optimizer imports ``torch._dynamo``
    (``Optimizer.add_param_group`` is wrapped by ``torch._disable_dynamo``): about a second on a CPU,
    a third of ``import torch`` again, which the doctor (and ``auto``'s quick check) must not pay to
    learn what a precision does. The engine's path is the same as for any for-loop optimizer
    (GradScaler unscales ``param_groups`` and calls ``step()`` only when no inf was found)."""

    _step_supports_amp_scaling = False

    def __init__(self, params, lr: float):
        self.param_groups = [{"params": [p for p in params if p.requires_grad], "lr": lr}]
        self.state: dict = {}
        self._post_hooks: OrderedDict = OrderedDict()  # RemovableHandle holds it by weak reference

    def step(self) -> None:
        with torch.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.add_(p.grad, alpha=-group["lr"])
        for hook in list(self._post_hooks.values()):
            hook(self, (), {})

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad.zero_()

    def register_step_post_hook(self, hook):
        from torch.utils.hooks import RemovableHandle

        handle = RemovableHandle(self._post_hooks)
        self._post_hooks[handle.id] = hook
        return handle


class Block(nn.Module):
    """A pre-norm transformer encoder block and a classifier head."""

    def __init__(self, d: int):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d, max(1, d // 64), 4 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        return self.head(self.layer(x).mean(1))


def conv_net(c: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.ReLU(), nn.Conv2d(c, 2 * c, 3, padding=1, stride=2), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * c, 10))


def autocast_step(model: nn.Module, x: torch.Tensor, mode: str, device: torch.device):
    """One training step in fp32 or bf16 with plain ``torch.autocast`` (what the engine does for these
    two modes, which need no loss scaling): forward, backward, a plain SGD update. No host sync.

    The update is written out rather than ``torch.optim.SGD``: a process's first optimizer imports
    torch._dynamo (about a second), which the quick check behind ``auto`` must not pay."""
    if mode not in ("fp32", "bf16"):
        raise ValueError(f"autocast_step runs fp32 or bf16, not {mode}")
    torch.manual_seed(0)
    model = model.to(device)
    y = torch.randint(0, 10, (x.shape[0],), device=device)
    params = [p for p in model.parameters() if p.requires_grad]
    low = mode == "bf16"

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=low):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        with torch.no_grad():
            for p in params:
                p.add_(p.grad, alpha=-1e-3)
                p.grad = None
    return step


# ---------------------------------------------------------------- speedup_by_size
def size_work(mode: str, device: torch.device, n: int) -> Work:
    """One ``n``-square matmul in the mode's math (the size table of :mod:`ampkit.doctor.sizes`)."""
    return Work({"matmul": matmul_op(mode, device, n)}, {}, clock_for(device))


# ---------------------------------------------------------------- the quick check behind ``auto``
def quick_kernel_work(mode: str, device: torch.device) -> Work:
    return Work({"matmul": matmul_op(mode, device, QUICK_MATMUL_N)}, {}, clock_for(device))


def quick_training_work(mode: str, device: torch.device) -> Work:
    b, seq, d = QUICK_BLOCK
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    x = torch.randn(b, seq, d, generator=gen).to(device)
    return Work({}, {"train_transformer": (autocast_step(Block(d), x, mode, device), None)}, clock_for(device))


def quick_auto(device: torch.device) -> dict:
    """fp32 against bf16 on ``device`` with the doctor's rounds and thresholds, on one thread (as the
    doctor times): a cache entry for :mod:`ampkit.auto` (well under a second on a CPU).

    It leaves no trace in the caller's process: the global random state is restored (the caller's
    seeded initialisation stays the same with and without ``auto``), gradients are on even inside
    the caller's ``no_grad``, the thread count is restored."""
    from ...auto import quick_check

    with (measuring_threads(device), torch.random.fork_rng(devices=[]), torch.inference_mode(False),
          torch.enable_grad()):
        return quick_check(lambda m: quick_kernel_work(m, device), lambda m: quick_training_work(m, device),
                           threads=DEFAULT_CPU)
