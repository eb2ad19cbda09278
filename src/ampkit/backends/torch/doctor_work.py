"""What doctor times for PyTorch, per mode: kernels (a matmul and a convolution in the mode's math)
and short training steps through the engine (a small conv net and a small transformer block),
sized for the device. The interleaving, the rounds and the statistics are in
:mod:`ampkit.doctor.measure`; this module only builds the work.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...doctor.measure import Plan, Work
from ...precision import get_precision
from .engine import MixedPrecision
from .tf32 import tf32_scope
from .timing import clock_for


def sizes(device: torch.device) -> dict:
    if device.type == "cuda":
        return {"matmul_n": 8192, "conv": (64, 256, 56, 56, 256), "net": (64, 64, 64), "block": (32, 256, 512)}
    # CPU: small enough that an emulated mode's step stays well under a second
    return {"matmul_n": 512, "conv": (8, 32, 32, 32, 64), "net": (8, 16, 16), "block": (8, 64, 256)}


def plan(device: torch.device) -> Plan:
    return Plan(budget_s=10.0, op_box_s=0.1, max_reps=10) if device.type == "cuda" else Plan()


@contextlib.contextmanager
def measuring_threads(device: torch.device):
    """On a CPU, time on one thread: the ratio of per-core speeds is what a mode changes, and on a
    shared CPU a multi-threaded step waits at every barrier for a descheduled thread (measured on a
    busy 2-core machine: the same step took 1.7 ms on one thread and 300 ms on two)."""
    if device.type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _dtype(mode: str) -> torch.dtype:
    p = get_precision(mode)
    return getattr(torch, p.compute_dtype) if p.autocast else torch.float32


def kernels(mode: str, device: torch.device, s: dict) -> dict:
    """{op: (callable, flops per call)} in the mode's math (inputs already in its dtype)."""
    n = s["matmul_n"]
    if mode == "fp8":  # a scaled e4m3 matmul; fp8 is reported, not trained with
        a8 = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
        b8 = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
        one = torch.tensor(1.0, device=device)
        return {"matmul": (lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                           2.0 * n**3)}
    tf32 = get_precision(mode).tf32
    dtype = _dtype(mode)
    bs, cin, h, w, cout = s["conv"]
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    x = torch.randn(bs, cin, h, w, device=device, dtype=dtype)
    k = torch.randn(cout, cin, 3, 3, device=device, dtype=dtype)
    if device.type == "cuda":
        x, k = x.to(memory_format=torch.channels_last), k.to(memory_format=torch.channels_last)

    def in_mode(fn):
        def call():
            with tf32_scope(tf32):
                return fn()
        return call

    return {"matmul": (in_mode(lambda: torch.mm(a, b)), 2.0 * n**3),
            "conv": (in_mode(lambda: F.conv2d(x, k, padding=1)), 2.0 * bs * cout * cin * 9 * h * w)}


class _Block(nn.Module):
    """A pre-norm transformer encoder block and a classifier head."""

    def __init__(self, d: int):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d, max(1, d // 64), 4 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        return self.head(self.layer(x).mean(1))


def _conv_net(c: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.ReLU(), nn.Conv2d(c, 2 * c, 3, padding=1, stride=2), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * c, 10))


def _train_step(model: nn.Module, x: torch.Tensor, mode: str, device: torch.device):
    torch.manual_seed(0)
    model = model.to(device)
    y = torch.randint(0, 10, (x.shape[0],), device=device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    mp = MixedPrecision(mode, device, model=model)

    def step():  # autocast forward, (scaled) backward, unscale + step + update: no host sync here
        with mp.autocast():
            loss = F.cross_entropy(model(x), y)
        mp.backward(loss)
        mp.step(opt, zero_grad=True)
    return step


def training(mode: str, device: torch.device, s: dict) -> dict:
    gen = torch.Generator().manual_seed(0)
    bs, c, hw = s["net"]
    b2, seq, d = s["block"]
    torch.manual_seed(0)
    net, block = _conv_net(c), _Block(d)
    x_img = torch.randn(bs, 3, hw, hw, generator=gen).to(device)
    x_seq = torch.randn(b2, seq, d, generator=gen).to(device)
    return {"train_convnet": (_train_step(net, x_img, mode, device), None),
            "train_transformer": (_train_step(block, x_seq, mode, device), None)}


def work(mode: str, device: torch.device) -> Work:
    s = sizes(device)
    return Work(kernels(mode, device, s), {} if mode == "fp8" else training(mode, device, s), clock_for(device))
