"""Issue #22: ``mp.verify(model, optimizer)`` — the precision contract, checked after a real step.

Each planted violation gives exactly one finding naming the layer or parameters; the unmodified
models (a tiny MLP, a torchvision resnet18 and a transformers BertModel built from a config with
random weights) give none. FSDP2 cases are in ``test_engine_fsdp.py``.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn as nn

from ampkit.backends.torch.engine import MixedPrecision
from ampkit.backends.torch.engine.contract import verify_torch

KEYS = {"where", "expected", "actual", "advice", "check"}


def tiny_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def batch(seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(6, 8, generator=g), torch.randint(0, 4, (6,), generator=g)


def one_step(mode, model=None, opt_cls=torch.optim.AdamW, forward=None, **kw):
    model = model or tiny_model()
    mp = MixedPrecision(mode, "cpu", model=model, init_scale=2.0**8, **kw)
    opt = opt_cls(model.parameters(), lr=1e-3)
    x, y = batch()
    with (forward or mp.autocast)():
        loss = nn.functional.cross_entropy(model(x), y)
    mp.backward(loss)
    mp.step(opt)
    return mp, model, opt


@pytest.mark.parametrize("mode", ["fp16", "bf16", "fp32"])
def test_an_unmodified_model_after_a_step_gives_no_finding(mode):
    mp, model, opt = one_step(mode)
    assert mp.verify(model, opt) == []
    assert mp.verify() == []  # the prepared model by default (the watch re-armed: no forward since)


def test_one_layer_cast_to_half_gives_one_finding_naming_the_layer():
    mp, model, opt = one_step("bf16")
    model[2].half()  # its weights, and the optimizer state that follows them, are float16 now
    for st in opt.state.values():
        for k, v in list(st.items()):
            if k != "step" and v.shape == model[2].weight.shape:
                st[k] = v.half()
    (finding,) = mp.verify(model, opt, example_input=batch()[0])
    assert set(finding) == KEYS and finding["check"] == "master_weights"
    assert finding["where"] == "layer 2 (Linear): weight, bias"
    assert (finding["expected"], finding["actual"]) == ("float32 master weights", "float16")
    assert ".half()" in finding["advice"]


def test_adamw_state_cast_to_bfloat16_gives_one_finding_naming_the_parameters():
    mp, model, opt = one_step("fp16")
    for st in opt.state.values():
        for k in ("exp_avg", "exp_avg_sq"):
            st[k] = st[k].to(torch.bfloat16)
    (finding,) = mp.verify(model, opt)
    assert finding["check"] == "optimizer_state"
    assert finding["where"] == "optimizer 0 (AdamW) state of 0.weight, 0.bias, 2.weight, 2.bias"
    assert (finding["expected"], finding["actual"]) == ("float32 (exp_avg, exp_avg_sq)", "bfloat16")
    assert mp.verify(model) == []  # without the optimizer: its state is not looked at


def test_one_parameters_state_in_bfloat16_is_named_alone():
    mp, model, opt = one_step("bf16", opt_cls=torch.optim.SGD)  # SGD without momentum: no state
    assert mp.verify(model, opt) == []
    opt2 = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with mp.autocast():
        out = model(batch()[0])
    out.float().sum().backward()
    opt2.step()
    opt2.state[model[0].bias]["momentum_buffer"] = opt2.state[model[0].bias]["momentum_buffer"].bfloat16()
    (finding,) = mp.verify(model, [opt, opt2])
    assert finding["where"] == "optimizer 1 (SGD) state of 0.bias" and finding["actual"] == "bfloat16"


def test_a_forward_outside_autocast_gives_one_finding_naming_the_layers():
    mp, model, opt = one_step("fp16", forward=contextlib.nullcontext)  # no autocast around the forward
    (finding,) = [f for f in mp.verify(model, opt) if f["check"] == "autocast"]
    assert finding["where"] == "layers 0 (Linear), 2 (Linear)"
    assert finding["actual"] == "float32: autocast was not active" and "mp.autocast()" in finding["advice"]


def test_autocast_in_another_dtype_and_a_float16_loss_are_found():
    model = tiny_model()
    mp = MixedPrecision("fp16", "cpu", model=model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, _ = batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(x).pow(2).mean()  # a hand-made loss stays bfloat16
    mp.backward(loss)
    mp.step(opt)
    found = {f["check"]: f for f in mp.verify(model, opt)}
    assert set(found) == {"autocast", "loss"}
    assert found["autocast"]["actual"] == "bfloat16: autocast ran in bfloat16"
    assert (found["loss"]["where"], found["loss"]["actual"]) == ("loss", "bfloat16")


class _KeepsHeadInFloat32(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.head = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        h = self.body(x)
        with torch.autocast("cpu", enabled=False):
            return self.head(h.float())


def test_a_probe_on_an_example_input_finds_a_layer_run_outside_autocast():
    torch.manual_seed(0)
    model = _KeepsHeadInFloat32()
    mp = MixedPrecision("bf16", "cpu")
    (finding,) = mp.verify(model, example_input=torch.randn(2, 8))
    assert finding["where"] == "layer head (Linear)" and finding["actual"].startswith("float32: outside autocast")
    assert mp.verify(tiny_model(), example_input=torch.randn(2, 8)) == []


def test_autocast_in_a_float32_mode_is_a_finding():
    mp, model, opt = one_step("fp32", forward=lambda: torch.autocast("cpu", dtype=torch.bfloat16))
    (finding,) = mp.verify(model, opt)
    assert finding["check"] == "autocast" and finding["expected"] == "matmul/conv in float32"


def test_verify_torch_alone_and_bad_arguments():
    model = tiny_model()
    assert verify_torch(model, compute_dtype="bfloat16", example_input=torch.randn(2, 8)) == []
    model[0].to(torch.float64)
    (finding,) = verify_torch(model, compute_dtype=torch.float16)
    assert finding["where"] == "layer 0 (Linear): weight, bias" and finding["actual"] == "float64"
    with pytest.raises(ValueError, match="compute_dtype"):
        verify_torch(model, compute_dtype="half-ish")
    with pytest.raises(ValueError, match="torch.nn.Module"):
        MixedPrecision("bf16", "cpu").verify("model.pt")
    with pytest.raises(ValueError, match="needs the model"):
        MixedPrecision("bf16", "cpu").verify()
    with pytest.raises(ValueError, match="optimizers"):
        verify_torch(tiny_model(), {"lr": 1}, compute_dtype="float32")


def test_the_watch_costs_nothing_after_the_first_forward():
    mp, model, opt = one_step("bf16")
    assert all(not m._forward_hooks for m in model.modules())  # the one-shot hooks removed themselves
    mp.verify(model, opt)  # re-arms for the next forward
    assert any(m._forward_hooks for m in model.modules())
    with mp.autocast():
        model(batch()[0])
    assert all(not m._forward_hooks for m in model.modules())


# ---------------------------------------------------------------- real third-party models, random weights
def test_torchvision_resnet18_gives_no_finding(mode="bf16"):
    tv = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = tv.models.resnet18(weights=None, num_classes=10)
    mp = MixedPrecision(mode, "cpu", model=model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(2, 3, 32, 32), torch.tensor([1, 7])
    with mp.autocast():
        loss = nn.functional.cross_entropy(model(x), y)
    mp.backward(loss)
    mp.step(opt)
    assert len(mp._watch.layers) == 21  # 20 convolutions and the classifier were seen
    assert mp.verify(model, opt) == []


def test_transformers_bert_from_a_config_gives_no_finding():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=32, max_position_embeddings=16)
    model = transformers.BertModel(cfg)
    mp = MixedPrecision("bf16", "cpu", model=model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 64, (2, 8))
    with mp.autocast():
        loss = model(input_ids=ids).last_hidden_state.float().pow(2).mean()
    mp.backward(loss)
    mp.step(opt)
    assert mp.verify(model, opt) == []
    model.pooler.dense.half()
    (finding,) = mp.verify(model, opt, example_input={"input_ids": ids})
    assert finding["where"] == "layer pooler.dense (Linear): weight, bias"


# ---------------------------------------------------------------- ampkit audit: findings of kind "contract"
class _DoubleHead(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body, self.head = nn.Linear(8, 16), nn.Linear(16, 4).double()

    def forward(self, x):  # float64 weights: the engine lets them through, autocast does not cast them
        return self.head(torch.relu(self.body(x)).double()).float()


def test_ampkit_audit_reports_the_contract_as_findings_of_kind_contract():
    import ampkit

    def loss_by_hand(out, target):  # the outputs squared by hand in float16: a float16 loss
        return (out.half() - nn.functional.one_hot(target, 4).half()).pow(2).mean()

    report = ampkit.audit(_DoubleHead(), batch(), loss_by_hand, mode="fp16", device="cpu", loss_scale=8.0)
    contract = [f for f in report.to_dict()["findings"] if f["kind"] == "contract"]
    assert [f["layer"] for f in contract] == ["layer head (Linear): weight, bias", "loss"]
    assert all(f["severity"] == "warning" for f in contract)
    assert contract[0]["advice"].startswith("expected float32 master weights, found float64: ")
    assert contract[1]["advice"].startswith("expected float32 loss, found float16: ")


def test_an_example_input_the_model_cannot_take_is_one_line_naming_verify():
    """verify(example_input='abc') raised linear()'s TypeError from inside the model's forward."""
    from ampkit.errors import UsageError

    mp = MixedPrecision("bf16", device="cpu")
    model = nn.Sequential(nn.Linear(8, 4))
    with pytest.raises(UsageError, match=r"verify\(example_input=...\): the model's forward failed on it: TypeError"):
        mp.verify(model, example_input="abc")
    with pytest.raises(UsageError, match="RuntimeError: mat1 and mat2"):
        mp.verify(model, example_input=torch.randn(3, 5))
    with pytest.raises(UsageError, match="needs a torch.nn.Module, received str"):
        mp.verify("x")
    with pytest.raises(UsageError, match="takes torch optimizers, received generator"):
        mp.verify(model, (o for o in ()))
