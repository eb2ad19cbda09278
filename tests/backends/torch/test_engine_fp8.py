"""fp8 training through torchao (issue #28): ``MixedPrecision("fp8")`` converts eligible Linear layers
in ``prepare`` with torchao's float8 training API and runs the rest under bf16 autocast.

Ported from torchao's own tests (pytorch/ao): test/float8/test_base.py
``test_swap_root_linear`` / ``test_swap_submodule_linears_with_skip`` (what a module filter converts and
skips, the root Linear returned anew) and test/float8/test_numerics_integration.py (an fp8 model
against its high-precision reference, same weights and batch). On this CPU everything runs in torchao's
emulation (``Float8LinearConfig(emulate=True)``); the `gpu` tests check real fp8 on cc >= 8.9.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import ampkit
from ampkit.backends.torch.engine import MixedPrecision
from ampkit.errors import ModeUnavailableError, UsageError

pytest.importorskip("torchao")
from torchao.float8 import Float8LinearConfig, convert_to_float8_training  # noqa: E402
from torchao.float8.float8_linear import Float8Linear  # noqa: E402


def odd_model() -> nn.Sequential:
    """Six Linear layers; only '8' (64x64) is eligible: '0' is the first, '10' the last, '4' the issue's
    100x30 weight, '2' and '6' hold a 30 or a 100 (not multiples of 16)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 30), nn.ReLU(), nn.Linear(30, 100), nn.ReLU(),
                         nn.Linear(100, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def batch(n: int = 16):
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 32, generator=g), torch.randint(0, 10, (n,), generator=g)


def train(model, mp, opt, x, y, steps: int) -> list[float]:
    losses = []
    for _ in range(steps):
        with mp.autocast():
            loss = F.cross_entropy(model(x), y)
        mp.backward(loss)
        mp.step(opt, zero_grad=True)
        losses.append(float(loss.detach()))
    return losses


def test_eligible_layers_are_converted_and_the_rest_say_why():
    mp = MixedPrecision("fp8", "cpu")
    assert mp.mode == "fp8" and mp.emulated is True
    assert "emulation" in mp.reason and "compute capability >= 8.9" in mp.reason and "without fp8 speed" in mp.reason
    model = mp.prepare(odd_model())
    layers = {d["name"]: d for d in mp.fp8_layers}
    assert list(layers) == ["0", "2", "4", "6", "8", "10"]
    assert [n for n, d in layers.items() if d["converted"]] == ["8"]
    assert type(model[8]) is Float8Linear and all(type(model[i]) is nn.Linear for i in (0, 2, 4, 6, 10))
    assert layers["4"]["shape"] == [100, 30]
    assert layers["4"]["reason"] == ("in_features 30 and out_features 100 not a multiple of 16 (fp8 matmuls need "
                                     "it): kept in bf16")
    assert layers["6"]["reason"].startswith("in_features 100 not a multiple of 16")
    assert layers["2"]["reason"].startswith("out_features 30 not a multiple of 16")
    assert layers["0"]["reason"].startswith("the first Linear layer: kept in bf16")
    assert layers["10"]["reason"].startswith("the last Linear layer: kept in bf16")
    assert layers["8"]["reason"] == "converted to torchao Float8Linear (tensorwise, emulated)"
    # training works: master weights stay float32, the non-converted layers compute in bf16, loss goes down
    x, y = batch()
    seen = {}
    hooks = [model[i].register_forward_hook(lambda m, a, o, i=i: seen.__setitem__(i, o.dtype)) for i in (4, 8)]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = train(model, mp, opt, x, y, 4)
    for h in hooks:
        h.remove()
    assert seen == {4: torch.bfloat16, 8: torch.bfloat16}
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert losses[-1] < losses[0] and all(map(torch.isfinite, map(torch.tensor, losses)))


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_one_step_equals_torchao_used_by_hand(recipe):
    """The engine adds nothing to torchao: the same conversion, config and bf16 autocast by hand give
    identical losses and weights after a step."""
    base = odd_model()
    x, y = batch()
    mp = MixedPrecision("fp8", "cpu", fp8_recipe=recipe)
    ours = mp.prepare(copy.deepcopy(base))
    opt = torch.optim.AdamW(ours.parameters(), lr=1e-2)
    our_loss = train(ours, mp, opt, x, y, 1)[0]

    def module_filter_fn(mod: nn.Module, fqn: str) -> bool:  # torchao's README filter, first and last too
        return fqn not in ("0", "10") and mod.in_features % 16 == 0 and mod.out_features % 16 == 0

    config = dataclasses.replace(Float8LinearConfig.from_recipe_name(recipe), emulate=True)
    theirs = convert_to_float8_training(copy.deepcopy(base), module_filter_fn=module_filter_fn, config=config)
    opt2 = torch.optim.AdamW(theirs.parameters(), lr=1e-2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.cross_entropy(theirs(x), y)
    loss.backward()
    opt2.step()
    assert our_loss == float(loss.detach())
    assert type(theirs[8]) is Float8Linear and theirs[8].config == ours[8].config
    for (name, a), (_, b) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert torch.equal(a, b), name
    # and fp8 really differs from bf16 (the emulation is not a no-op)
    bf = copy.deepcopy(base)
    mp16 = MixedPrecision("bf16", "cpu")
    assert train(bf, mp16, torch.optim.AdamW(bf.parameters(), lr=1e-2), x, y, 1)[0] != our_loss


def test_state_dict_resumes_exactly():
    x, y = batch()

    def fresh():
        mp = MixedPrecision("fp8", "cpu", fp8_recipe="rowwise")
        model = mp.prepare(odd_model())
        return mp, model, torch.optim.AdamW(model.parameters(), lr=1e-2)

    mp, model, opt = fresh()
    straight = train(model, mp, opt, x, y, 4)
    mp, model, opt = fresh()
    train(model, mp, opt, x, y, 2)
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "mp": mp.state_dict()}, buf)
    buf.seek(0)
    ckpt = torch.load(buf, weights_only=True)
    assert ckpt["mp"]["fp8"] == {"recipe": "rowwise", "emulated": True, "skip_first_last": True, "converted": ["8"]}
    mp2, model2, opt2 = fresh()
    model2.load_state_dict(ckpt["model"])
    opt2.load_state_dict(ckpt["opt"])
    mp2.load_state_dict(ckpt["mp"])
    resumed = train(model2, mp2, opt2, x, y, 2)
    assert resumed == straight[2:] and mp2.stats["steps"] == 4
    with pytest.raises(ValueError, match="fp8_recipe='rowwise'.*fp8_recipe='tensorwise'"):
        MixedPrecision("fp8", "cpu").load_state_dict(ckpt["mp"])


def test_keywords_change_what_is_converted_and_a_root_linear_comes_back_converted():
    mp = MixedPrecision("fp8", "cpu", fp8_skip_first_last=False, fp8_filter=lambda module, name: name != "8")
    model = mp.prepare(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 16),
                                     nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 32)))
    assert [d["name"] for d in mp.fp8_layers if d["converted"]] == ["0", "2", "4", "5", "6", "7"]
    assert next(d for d in mp.fp8_layers if d["name"] == "8")["reason"] == "your fp8_filter returned False: kept in bf16"
    again = mp.prepare(model)  # prepare twice: nothing converted twice
    assert again is model and next(d for d in mp.fp8_layers if d["name"] == "2")["reason"] == "already a torchao Float8Linear"
    root = MixedPrecision("fp8", "cpu", fp8_skip_first_last=False).prepare(nn.Linear(32, 32))
    assert type(root) is Float8Linear
    mha = MixedPrecision("fp8", "cpu", fp8_skip_first_last=False)
    mha.prepare(nn.TransformerEncoderLayer(32, 2, 64, batch_first=True))
    layers = {d["name"]: d for d in mha.fp8_layers}
    assert not layers["self_attn.out_proj"]["converted"] and "subclasses nn.Linear" in layers["self_attn.out_proj"]["reason"]
    assert layers["linear1"]["converted"] and layers["linear2"]["converted"]


def test_bad_fp8_arguments_are_one_line_usage_errors():
    with pytest.raises(UsageError, match="fp8_recipe must be one of tensorwise, rowwise; received 'colwise'"):
        MixedPrecision("fp8", "cpu", fp8_recipe="colwise")
    with pytest.raises(UsageError, match="are for mode 'fp8'; received mode 'bf16'"):
        MixedPrecision("bf16", "cpu", fp8_recipe="rowwise")
    with pytest.raises(UsageError, match="fp8_filter must be a callable"):
        MixedPrecision("fp8", "cpu", fp8_filter="0")
    with pytest.raises(TypeError, match="float32 master weights"):
        MixedPrecision("fp8", "cpu").prepare(nn.Linear(32, 32).bfloat16())
    assert MixedPrecision("bf16", "cpu").fp8_layers == [] and MixedPrecision("bf16", "cpu").emulated is False


def test_without_torchao_fp8_says_install_the_extra(monkeypatch):
    import importlib.util

    from ampkit.precision import COMMAND_MODES, TRAINING_MODES, parse_mode_list

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchao" else real(name, *a))
    with pytest.raises(ModeUnavailableError) as err:
        MixedPrecision("fp8", "cpu")
    assert str(err.value) == "fp8 training needs torchao: pip install 'ampkit[fp8]'"
    assert parse_mode_list("all") == list(TRAINING_MODES) and parse_mode_list("fp32,fp8") == ["fp32", "fp8"]
    from ampkit.registry import get_backend

    backend = get_backend("torch")
    assert backend.training_support("fp8", backend.target("cpu")) == (False, False, str(err.value))
    monkeypatch.undo()
    assert parse_mode_list("all") == list(COMMAND_MODES)


def test_nothing_imports_torchao_unless_fp8_is_asked_for():
    """A fresh process that loads the torch backend (bench, parity, audit, doctor), parses ``--modes
    all`` (fp8 included: torchao is found, not imported), asks as the doctor does whether fp8 trains
    here and trains in bf16 has no torchao in it. (Asked outside the doctor, training_support('fp8')
    imports it: a broken install is said before any work, issue #40.)"""
    code = ("import sys, torch, ampkit\n"
            "from ampkit.registry import get_backend\n"
            "b = get_backend('torch'); t = b.target('cpu')\n"
            "from ampkit.precision import parse_mode_list\n"
            "assert 'fp8' in parse_mode_list('all')\n"
            "with b.doctor_session(t):\n"
            "    assert b.training_support('fp8', t)[:2] == (True, True)\n"
            "mp = ampkit.MixedPrecision('bf16', 'cpu', model=torch.nn.Linear(16, 16))\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torchao'))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "[]"
    MixedPrecision("fp8", "cpu")  # and asking for fp8 is what imports it
    assert "torchao.float8" in sys.modules


@pytest.mark.gpu
def test_fp8_on_a_cc89_gpu_is_real_and_bench_reports_its_speedup():
    if torch.cuda.get_device_capability(0) < (8, 9):
        pytest.skip("real fp8 needs compute capability >= 8.9")
    mp = MixedPrecision("fp8", "cuda")
    assert mp.emulated is False and "torchao float8 training kernels" in mp.reason
    model = mp.prepare(nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(),
                                     nn.Linear(1024, 10)).cuda())
    assert mp.fp8_layers[1]["reason"] == "converted to torchao Float8Linear (tensorwise, fp8 kernels)"
    x, y = torch.randn(64, 256, device="cuda"), torch.randint(0, 10, (64,), device="cuda")
    losses = train(model, mp, torch.optim.AdamW(model.parameters(), lr=1e-3), x, y, 3)
    assert losses[-1] < losses[0]
    report = ampkit.bench("mlp", modes=["fp32", "fp8"], device="cuda", steps=10, warmup=3)
    fp8 = next(r for r in report.results if r.mode == "fp8")
    assert fp8.status == "ok" and fp8.emulated is False and fp8.speedup_vs_fp32 is not None, fp8
