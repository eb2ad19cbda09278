"""ampkit.MixedPrecision with a torch.compile'd model (inductor, CPU): the same losses, skips and scales
as eager, and no graph break in the model's graph (the scaler and the step stay outside it).

One compiled tiny MLP for the whole module (compiling is the cost: each mode compiles once, its
weights are reloaded between runs). Ported in spirit from torch's test/inductor/test_torchinductor.py
AMP cases (autocast around a compiled module) and test/test_cuda.py's GradScaler skip tests (an inf
injected into the loss skips exactly that step and halves the scale).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

from ampkit.backends.torch.compiled import DynamoCounters, compile_unavailable
from ampkit.backends.torch.engine import MixedPrecision

CPU = torch.device("cpu")
pytestmark = pytest.mark.skipif(compile_unavailable(CPU) is not None, reason="inductor needs a C++ compiler")

STEPS = 6
INJECT = {2: float("inf"), 4: float("nan")}  # the loss multiplied by these at these steps
SCALER_KW = dict(init_scale=2.0**8, growth_factor=2.0, backoff_factor=0.5, growth_interval=2)
RTOL = {"fp16": 5e-3, "bf16": 3e-2}  # a few units of each format's epsilon (2**-10, 2**-7) on these losses


def tiny_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(6, 8, generator=g), torch.randint(0, 4, (6,), generator=g)) for _ in range(STEPS)]


#: fp16 compiles with inductor (torch.compile's default: its kernels, its numerics); bf16 with
#: aot_eager (dynamo and AOTAutograd, torch's kernels): a second inductor compile costs ~20 s on the
#: loaded 2-core CI machine. `ampkit bench --compile on` runs inductor in every mode.
BACKEND = {"fp16": "inductor", "bf16": "aot_eager"}


@pytest.fixture(scope="module")
def compiled():
    """{mode: (eager module, the same module compiled, its initial weights)}, compiled once per module."""
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    threads, inductor_config.compile_threads = inductor_config.compile_threads, 1  # no worker pool to start
    out = {}
    for mode, backend in BACKEND.items():
        model = tiny_model()
        out[mode] = model, torch.compile(model, backend=backend), {k: v.clone() for k, v in model.state_dict().items()}
    yield out
    inductor_config.compile_threads = threads


def train(model, mode, runner=None):
    """STEPS steps through MixedPrecision with INJECT: (losses, skipped, scales)."""
    mp = MixedPrecision(mode, CPU, model=model, **SCALER_KW)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses, skipped, scales = [], [], []
    for i, (x, y) in enumerate(batches()):
        with mp.autocast():
            loss = nn.functional.cross_entropy((runner or model)(x), y)
        losses.append(float(loss))
        mp.backward(loss * INJECT.get(i, 1.0))
        result = mp.step(opt, zero_grad=True)
        skipped.append(result.skipped)
        scales.append(result.scale)
    return losses, skipped, scales


@pytest.mark.parametrize("mode", ["fp16", "bf16"])
def test_compiled_training_matches_eager_losses_skips_and_scales(compiled, mode):
    model, cmodel, init = compiled[mode]
    model.load_state_dict(init)
    eager = train(tiny_model(), mode)
    with DynamoCounters() as counters:
        got = train(model, mode, runner=cmodel)
    assert got[1] == eager[1] and got[2] == eager[2]  # the same steps skipped, the same scale after each
    if mode == "fp16":  # the injected inf and NaN skip exactly their steps and halve the scale
        assert eager[1] == [False, False, True, False, True, False]
        assert eager[2] == [256.0, 512.0, 256.0, 256.0, 128.0, 128.0]
    else:  # bf16 scales nothing (the update with inf gradients is not skipped: the weights go non-finite)
        assert eager[1] == [False] * STEPS and eager[2] == [1.0] * STEPS
    n = 3 if mode == "bf16" else STEPS  # bf16: after the inf update the losses are NaN in both
    for a, b in zip(got[0][:n], eager[0][:n]):
        assert math.isclose(a, b, rel_tol=RTOL[mode]), (got[0], eager[0])
    if mode == "fp16":
        assert all(math.isfinite(v) for v in got[0])  # the skips kept the weights finite
    else:
        assert not math.isfinite(got[0][-1]) and not math.isfinite(eager[0][-1])
    # the scaler, the injected inf and the optimizer never broke the model's graph or recompiled it
    assert counters.graph_breaks == 0 and counters.reasons == [], counters.reasons
    assert counters.recompiles == 0


def test_explain_finds_one_graph_and_no_break_under_autocast(compiled):
    model, _cmodel, _init = compiled["bf16"]
    mp = MixedPrecision("bf16", CPU, model=model)
    with mp.autocast():
        explained = torch._dynamo.explain(model)(torch.randn(6, 8))
    assert explained.graph_break_count == 0 and explained.graph_count == 1


def test_a_graph_break_is_counted():
    """The counter is not blind: an .item() in forward breaks the graph once (no inductor: eager backend)."""

    class Breaks(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 4)

        def forward(self, x):
            y = self.lin(x)
            return y * y.sum().item()

    torch._dynamo.reset()
    with DynamoCounters() as counters:
        torch.compile(Breaks(), backend="eager")(torch.randn(2, 8))
    assert counters.graph_breaks == 1 and "item" in counters.reasons[0]
