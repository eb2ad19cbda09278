"""``mp.locate_overflows()`` keeps nothing from earlier steps (issue #10)."""

from __future__ import annotations

import gc
import warnings

import torch
import torch.nn as nn

from ampkit.backends.torch.engine import MixedPrecision


class Add(nn.Module):
    def forward(self, a, b):
        return a + b


class WithBias(nn.Module):
    """Passes one of its parameters to a submodule: the recorder hooks a LEAF tensor here."""

    def __init__(self, width):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(width))
        self.add = Add()

    def forward(self, x):
        return self.add(x, self.bias)


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), WithBias(16), nn.Linear(16, 16), nn.ReLU(),
                         nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))


def live_tensors() -> int:
    gc.collect()
    with warnings.catch_warnings():  # isinstance() on torch's deprecated module aliases warns
        warnings.simplefilter("ignore")
        return sum(1 for o in gc.get_objects() if isinstance(o, torch.Tensor))


def test_locator_holds_a_constant_number_of_live_tensors_over_400_steps():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    mp = MixedPrecision("fp16", "cpu", init_scale=2.0**8, growth_interval=20, model=model)
    mp.locate_overflows()
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(4, 8, generator=g), torch.randint(0, 4, (4,), generator=g)
    bad_x = x.clone()
    bad_x[0, 0] = float("inf")
    counts, hooks, located = {}, {}, []
    for step in range(1, 401):
        inject = step % 40 == 0
        with mp.autocast():
            loss = nn.functional.cross_entropy(model(bad_x if inject else x), y)
        mp.backward(loss)
        r = mp.step(opt, zero_grad=True)
        assert r.skipped == inject
        if inject:
            located.append(r.overflow)
        if step % 10 == 0:  # an evaluation pass now and then: nothing of it may be kept either
            with torch.no_grad(), mp.autocast():
                model(x)
        if step in (50, 400):
            counts[step] = live_tensors()
            hooks[step] = len(model[2].bias._backward_hooks or {})
    # the inf is in the batch: float32 fails at the first linear too
    # still finds the first overflow each time
    assert located == [{"name": "0", "phase": "forward", "op": "linear", "in_reference": True}] * 10
    assert counts[400] <= counts[50], f"live tensors grew: {counts}"
    assert hooks == {50: 0, 400: 0}, "hooks left on a parameter after the step"
    mp.locate_overflows(enabled=False)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
