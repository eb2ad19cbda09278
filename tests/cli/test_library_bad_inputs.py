"""The library's entry points refuse bad arguments with a UsageError naming the parameter (what the
CLI prints as one line), before any training -- never an AttributeError or a torch ValueError from
deep inside (found by a stranger's run of ampkit.bench/audit/parity)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import ampkit
from ampkit.errors import UsageError

X, Y = torch.randn(8, 4), torch.randint(0, 3, (8,))
MODEL = nn.Linear(4, 3)


def _parity(**kw):
    args = {"make_model": lambda: nn.Linear(4, 3), "train": (X, Y), "test": (X, Y), "seeds": 1, "epochs": 1,
            "device": "cpu"}
    args.update(kw)
    return ampkit.parity(args.pop("make_model"), args.pop("train"), args.pop("test"), **args)


@pytest.mark.parametrize("call, needle", [
    (lambda: ampkit.bench(5), "--workload must be a name"),
    (lambda: ampkit.bench("mlp", modes=5), "--modes must be a comma-separated string or a list"),
    (lambda: ampkit.audit("notamodel", (X, Y)), "takes a torch.nn.Module or an ampkit.Workload; received str"),
    (lambda: ampkit.audit(MODEL, 42), "batch must be (inputs, targets); received int"),
    (lambda: ampkit.audit(MODEL, (X, Y), lr=-1), "lr must be a number >= 0 (0 keeps the weights); received -1"),
    (lambda: _parity(batch_size=0), "batch_size must be a positive integer; received 0"),
    (lambda: _parity(lr=float("nan")), "lr must be a positive number; received nan"),
    (lambda: _parity(make_model=nn.Linear(4, 3)), "make_model must be a factory returning a fresh model"),
    (lambda: _parity(make_model=5), "make_model must be a zero-argument callable"),
    (lambda: _parity(train=(X, Y[:3])), "train needs as many targets as inputs, at least one; received 8 inputs, 3"),
    (lambda: _parity(seeds=[3, 3]), "seeds must be distinct"),
])
def test_the_library_says_which_argument_is_wrong(call, needle):
    with pytest.raises(UsageError) as info:
        call()
    assert needle in str(info.value) and "\n" not in str(info.value), str(info.value)
