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
    # issue #40: a float seed silently became another seed; a string was a raw ValueError
    (lambda: _parity(seeds=[1.5, 2.7]), "(1.5 is not one)"),
    (lambda: _parity(seeds=["a"]), "('a' is not one)"),
    (lambda: _parity(seeds=[-1]), "whole numbers >= 0"),
    (lambda: _parity(seeds="3"), "a number of seeds or a list"),
    (lambda: ampkit.audit(MODEL, (X, Y), what_if=True, mode="bf16"), "what_if runs float32 only"),
    (lambda: ampkit.audit(MODEL, (X, Y), loss_scale="1024"), "--loss-scale must be a number; received '1024'"),
    (lambda: ampkit.audit(MODEL, (X, Y), loss_scale=True), "--loss-scale must be a number; received True"),
    (lambda: ampkit.audit(MODEL, (X, Y), seed="a"), "seed must be >= 0"),
    # issue #40, after the first round: each of these ran every seed into a TypeError, and fp32 "failed too"
    (lambda: _parity(loss_fn=5), "loss_fn must be callable (logits, targets) -> scalar; received int"),
    (lambda: _parity(metric_fn="x"), "metric_fn must be callable (logits, targets) -> scalar; received str"),
    (lambda: _parity(progress=3), "progress must be a callable, None or True (the display in a notebook) or False"),
    (lambda: ampkit.bench("mlp", progress="yes"), "progress must be a callable"),
    (lambda: _parity(modes=[]), "no modes given"),
    (lambda: _parity(train=(X,)), "train must be (inputs, targets), a torch Dataset or DataLoader, or a tf.data.Dataset; "
                                     "received a tuple of 1"),
    (lambda: _parity(test=X), "test must be (inputs, targets), a torch Dataset or DataLoader, or a tf.data.Dataset; "
                                "received a Tensor"),
    (lambda: _parity(dataset=5), "dataset must be a name (a string); received 5"),
])
def test_the_library_says_which_argument_is_wrong(call, needle):
    with pytest.raises(UsageError) as info:
        call()
    assert needle in str(info.value) and "\n" not in str(info.value), str(info.value)


# ---- issue #40: the engine's numeric arguments and state get the CLI's rules

def _stepped_engine():
    mp = ampkit.MixedPrecision("fp16", "cpu")
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with mp.autocast():
        loss = nn.functional.cross_entropy(model(X), Y)
    mp.backward(loss)
    return mp, model, opt


@pytest.mark.parametrize("norm", [float("nan"), float("-inf"), -1, 0, "1", True])
def test_step_refuses_a_max_grad_norm_that_would_break_training(norm):
    """NaN made every weight NaN while health() said ok; -1 made the loss rise; 0 stopped training."""
    mp, model, opt = _stepped_engine()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(UsageError, match=r"max_grad_norm must be a number > 0 \(float\('inf'\) measures"):
        mp.step(opt, max_grad_norm=norm)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # nothing stepped
    assert mp.stats["steps"] == 0
    assert mp.step(opt, max_grad_norm=1.0).grad_norm is not None  # a good value still works afterwards


@pytest.mark.parametrize("corrupt, needle", [
    (lambda s: s["scaler"].update(scale=float("nan")), "loss scale (scaler['scale']) must be a finite number > 0, found nan"),
    (lambda s: s["scaler"].update(scale=-4.0), "must be a finite number > 0, found -4.0"),
    (lambda s: s["scaler"].update(scale="x"), "found 'x'"),
    (lambda s: s["scaler"].update(_growth_tracker="a"), "scaler['_growth_tracker'] must be a whole number >= 0"),
    (lambda s: s.update(steps=-3), "steps must be a whole number >= 0, found -3"),
    (lambda s: s.update(scaler=[1, 2]), "scaler must be a GradScaler state_dict, found list"),
    (lambda s: s.update(health=3), "health must be a dict, found int"),
    (lambda s: s["health"].update(steps="zz"), "corrupt state (ValueError"),
    (lambda s: s["scaler"].update(backoff_factor=3.0), "scaler['backoff_factor'] must be in (0, 1), found 3.0"),
    (lambda s: s["scaler"].update(growth_interval=0), "scaler['growth_interval'] must be a whole number > 0, found 0"),
])
def test_load_state_dict_refuses_corrupt_state_and_leaves_the_engine_unchanged(corrupt, needle):
    import copy

    saved = ampkit.MixedPrecision("fp16", "cpu", init_scale=1024.0).state_dict()
    state = copy.deepcopy(saved)
    corrupt(state)
    mp = ampkit.MixedPrecision("fp16", "cpu", init_scale=256.0)
    with pytest.raises(UsageError) as info:
        mp.load_state_dict(state)
    assert needle in str(info.value) and "\n" not in str(info.value), str(info.value)
    assert mp.stats["scale"] == 256.0 and mp.get_scale() == 256.0 and mp.health()["status"] == "ok"
    mp.load_state_dict(saved)
    assert mp.get_scale() == 1024.0


def test_accumulation_steps_must_be_a_whole_number():
    with pytest.raises(UsageError, match="accumulation_steps must be an int >= 1, received 1.5"):
        ampkit.MixedPrecision("bf16", "cpu", accumulation_steps=1.5)


@pytest.mark.parametrize("copier", ["deepcopy", "pickle"])
def test_a_copied_fp8_engine_keeps_its_bf16_regions(copier):
    """issue #40: the copy's autocast() was a plain float32 region, so Linear layers kept in bf16 ran float32."""
    import copy
    import pickle

    pytest.importorskip("torchao")
    mp = ampkit.MixedPrecision("fp8", "cpu")
    twin = copy.deepcopy(mp) if copier == "deepcopy" else pickle.loads(pickle.dumps(mp))
    lin = nn.Linear(4, 4)
    with mp.autocast():
        want = lin(X).dtype
    with twin.autocast():
        got = lin(X).dtype
    assert want == got == torch.bfloat16
