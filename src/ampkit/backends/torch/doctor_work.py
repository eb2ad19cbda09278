"""What doctor times for PyTorch, per mode: kernels (a matmul and a convolution in the mode's math)
and short training steps through the engine (a small conv net and a small transformer block),
sized for the device. The interleaving, the rounds and the statistics are in
:mod:`ampkit.rounds` (the plan of rounds: :mod:`ampkit.doctor.driver`); this module only
builds the work (the ops themselves, which need no engine, are in :mod:`.doctor_ops`, shared with the
quick check behind ``auto``).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...rounds import Work
from .doctor_ops import Block as _Block
from .doctor_ops import PlainSGD, conv_op, matmul_op, measuring_threads, size_work
from .doctor_ops import conv_net as _conv_net
from .engine import MixedPrecision
from .timing import clock_for

__all__ = ["kernels", "measuring_threads", "sizes", "training", "work"]


def sizes(device: torch.device) -> dict:
    if device.type == "cuda":
        return {"matmul_n": 8192, "conv": (64, 256, 56, 56, 256), "net": (64, 64, 64), "block": (32, 256, 512)}
    # CPU: small enough that an emulated mode's step stays well under a second
    return {"matmul_n": 512, "conv": (8, 32, 32, 32, 64), "net": (8, 16, 16), "block": (8, 64, 256)}


def kernels(mode: str, device: torch.device, s: dict) -> dict:
    """{op: (callable, flops per call)} in the mode's math (inputs already in its dtype)."""
    if mode == "fp8":  # a scaled e4m3 matmul (its training step: torchao, in work())
        return {"matmul": matmul_op(mode, device, s["matmul_n"])}
    return {"matmul": matmul_op(mode, device, s["matmul_n"]), "conv": conv_op(mode, device, s["conv"])}


def _train_step(model: nn.Module, x: torch.Tensor, mode: str, device: torch.device):
    torch.manual_seed(0)
    model = model.to(device)
    y = torch.randint(0, 10, (x.shape[0],), device=device)
    mp = MixedPrecision(mode, device, model=model)
    # torch.optim would import torch._dynamo (PlainSGD); fp8 imports torchao, which imports it anyway
    opt = torch.optim.SGD(model.parameters(), lr=1e-3) if mode == "fp8" else PlainSGD(model.parameters(), lr=1e-3)

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
    if mode == "fp8":  # where torchao is installed: the transformer block, its feed-forward Linears in fp8
        from .engine.fp8 import torchao_installed

        steps = ({k: v for k, v in training(mode, device, s).items() if k == "train_transformer"}
                 if torchao_installed() else {})
        return Work(kernels(mode, device, s), steps, clock_for(device),
                    at_size=lambda n: size_work(mode, device, n))
    return Work(kernels(mode, device, s), training(mode, device, s), clock_for(device),
                at_size=lambda n: size_work(mode, device, n))
