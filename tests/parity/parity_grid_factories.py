"""Factories for ``ampkit parity`` under torchrun (tests/parity/test_parity_grid.py): a small
classifier whose run of seed 1 on rank 1 dies of SIGKILL as it starts -- a rank killed mid-grid."""

from __future__ import annotations

import os
import signal
import time

import torch
import torch.nn as nn


def blobs():
    """96 points in 8 dimensions, 3 classes (a class's mean shifted): 64 to train, 32 to validate."""
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 3, (96,), generator=g)
    x = torch.randn(96, 8, generator=g) + nn.functional.one_hot(y, 8).float() * 2.0
    return (x[:64], y[:64]), (x[64:], y[64:])


def mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))


def dies_on_rank1_seed1():
    """The model of :func:`mlp`, except that rank 1's run of seed 1 is killed (SIGKILL) as it starts:
    torch.manual_seed(seed) ran just before this factory, so torch.initial_seed() is the run's seed."""
    if os.environ.get("RANK") == "1" and torch.initial_seed() == 1:
        if os.environ.get("DEATH_FILE"):  # when it died, for the test's clock
            with open(os.environ["DEATH_FILE"], "w") as fh:
                fh.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    return mlp()
