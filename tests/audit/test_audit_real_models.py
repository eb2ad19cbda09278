"""The audit on real third-party models built without weights (torchvision, timm, HuggingFace),
checked against an independent computation (tests/audit/realmodels.py), and on a planted
precision problem whose advice, run as code, fixes it."""

from __future__ import annotations

import ast
import json

import pytest
import realmodels as rm
import torch
import torch.nn as nn

import ampkit
from ampkit.audit.core import module_limit
from ampkit.backends.torch.workloads.base import call_model, cross_entropy
from ampkit.formats import BF16, FP16, precision_threshold

pytestmark = pytest.mark.slow

DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16}
FMT = {"bf16": BF16, "fp16": FP16}


def _image(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, 3, 32, 32, generator=g), torch.randint(0, 10, (4,), generator=g)


def _tokens(targets_per_token: bool, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 512, (2, 16), generator=g)
    y = torch.randint(0, 512, (2, 16), generator=g) if targets_per_token else torch.randint(0, 3, (2,), generator=g)
    return {"input_ids": ids}, y


MODELS = {
    "torchvision-resnet18": (rm.resnet18, _image),
    "torchvision-mobilenet_v3_small": (rm.mobilenet, _image),
    "timm-resnet18": (rm.timm_resnet, _image),
    "hf-bert": (rm.hf_bert, lambda: _tokens(False)),
    "hf-gpt2": (rm.hf_gpt2, lambda: _tokens(True)),
}


def _build(name):
    factory, data = MODELS[name]
    try:
        torch.manual_seed(0)
        return factory(), data()
    except ImportError as exc:  # the test extra brings all of them; a trimmed install skips
        pytest.skip(f"{name}: {exc}")


@pytest.mark.parametrize("mode", ["bf16", "fp16"])
@pytest.mark.parametrize("name", list(MODELS))
def test_real_model_has_no_false_alarm_and_errors_match_an_independent_computation(name, mode):
    model, (x, y) = _build(name)
    if hasattr(model, "config"):  # HF models keep their default dropout: the audit must make masks agree
        assert model.config.to_dict().get("hidden_dropout_prob", model.config.to_dict().get("resid_pdrop")) > 0
    model.eval()  # the audit runs train mode as training does, and gives the model back as it found it
    oracle = rm.independent_rel_errors(model, lambda m: cross_entropy(call_model(m, x), y).backward(), DTYPE[mode])
    model.eval()
    model.zero_grad(set_to_none=True)
    rep = ampkit.audit(model, (x, y), mode=mode, device="cpu", seed=0)
    assert not model.training
    assert rep.first_nonfinite is None
    bad = [f.to_dict() for f in rep.findings if f.kind in ("overflow", "nonfinite", "underflow")]
    assert bad == []
    measured = {lay.name: lay.rel_error for lay in rep.layers}
    assert set(measured) == set(oracle)
    for lname, want in oracle.items():
        got = measured[lname]
        assert got == pytest.approx(want, rel=1e-3, abs=1e-7), lname
    limit = module_limit(FMT[mode])  # the rule for a module that makes its error itself, fp16 and bf16 alike
    for f in rep.findings:
        assert f.kind == "precision" and oracle[f.layer] > limit and f.level == "note"
        ast.parse(f.code)


class Cancel(nn.Module):
    """Catastrophic cancellation: adding and removing 1000 keeps 10 - log2(1000) ~ 0 bits of x in fp16."""

    def forward(self, x):
        return (x + 1e3) - 1e3


def _cancelling():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), Cancel(), nn.Linear(32, 4))


def test_planted_cancellation_is_found_at_its_origin_and_its_code_fixes_it():
    g = torch.Generator().manual_seed(0)
    batch = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
    model = _cancelling()
    rep = ampkit.audit(model, batch, mode="fp16", device="cpu")
    found = [f for f in rep.findings if f.kind == "precision"]
    # the module that cancels, not the Linear after it that only inherits its error
    assert [f.layer for f in found] == ["1"]
    lay = {lay.name: lay for lay in rep.layers}
    assert lay["1"].rel_error > 0.05 and lay["1"].input_rel_error < 0.01
    assert lay["2"].rel_error > precision_threshold(FP16) and lay["2"].input_rel_error > lay["2"].rel_error / 2
    doc = rep.to_dict()
    assert doc["findings"][0]["severity"] == "note" and doc["findings"][0]["code"] == found[0].code
    code = found[0].code
    ast.parse(code)
    assert "model[1]" in code
    exec(code, {"torch": torch, "model": model})  # the advice, run as the user would
    fixed = ampkit.audit(model, batch, mode="fp16", device="cpu")
    assert not [f for f in fixed.findings if f.kind == "precision"]
    assert {la.name: la for la in fixed.layers}["1"].rel_error < 0.01


def test_advice_code_reaches_nested_modules_the_python_way():
    from ampkit.backends.torch.audit import module_expr

    model = rm.resnet18()
    assert module_expr(model, "layer1.0.bn1") == "model.layer1[0].bn1"
    assert eval(module_expr(model, "layer1.0.bn1"), {"model": model}) is model.layer1[0].bn1
    odd = nn.Module()
    odd.add_module("my-block", nn.ModuleDict({"a b": nn.Linear(2, 2)}))
    expr = module_expr(odd, "my-block.a b")
    assert eval(expr, {"model": odd}) is odd.get_submodule("my-block.a b")
    assert module_expr(model, "") == "model"


def test_default_fp16_scale_backs_off_like_gradscaler_and_a_fixed_scale_does_not():
    """Gradients of 1.5 overflow fp16 at GradScaler's 2**16 (98304 > 65504), not at 2**15: a default
    run skips one step and trains at 32768, which the audit reports without a finding; a scale the
    user fixes is audited as given. One sample: the bias gradient (a sum over the batch, which GradScaler
    checks too) is 1.5 as well -- at batch 8 it is 12, and a real step then skips down to 4096."""
    def loss(out, y):
        return out.float().sum() * 1.5

    def model():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(16, 4))

    g = torch.Generator().manual_seed(0)
    batch = torch.randn(1, 16, generator=g) * 0.1, None
    m, scaler = model(), torch.amp.GradScaler("cpu")  # a real default step on the same batch
    with torch.autocast("cpu", dtype=torch.float16):
        scaler.scale(loss(m(batch[0]), None)).backward()
    scaler.step(torch.optim.SGD(m.parameters(), lr=0.0))
    scaler.update()
    assert scaler.get_scale() == 32768.0
    rep = ampkit.audit(model(), batch, loss_fn=loss, mode="fp16", device="cpu")
    assert (rep.loss_scale, rep.skipped_steps) == (32768.0, 1)
    assert rep.to_dict()["initial_loss_scale"] == 65536.0
    assert rep.findings == [] and rep.first_nonfinite is None
    assert "skips its first 1 step(s)" in rep.note
    fixed = ampkit.audit(model(), batch, loss_fn=loss, mode="fp16", loss_scale=65536.0, device="cpu")
    assert fixed.loss_scale == 65536.0 and fixed.skipped_steps == 0
    assert fixed.first_nonfinite is not None and fixed.first_nonfinite["phase"] == "backward"
    assert any(f.kind == "nonfinite" and f.level == "error" for f in fixed.findings)


def test_planted_cancellation_audit_is_not_clean_in_the_report(tmp_path):
    from ampkit.report import build, load, markdown

    g = torch.Generator().manual_seed(0)
    batch = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
    rep = ampkit.audit(_cancelling(), batch, mode="fp16", device="cpu")
    path = tmp_path / "audit.json"
    path.write_text(json.dumps(rep.to_dict()))
    page = markdown(build(load(str(path))))
    assert "1 finding: 1 note" in page and "clean" not in page.lower()


class Big(nn.Module):
    def forward(self, x):
        return x * 1e5


class OverNet(nn.Module):
    """fp32 values of 1e5 in the middle: fp16 overflows there until ``big`` runs in float32."""

    def __init__(self):
        super().__init__()
        self.fc1, self.big, self.fc2 = nn.Linear(16, 32), Big(), nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(self.big(self.fc1(x)) * 1e-5)


def test_overflow_advice_run_as_code_clears_it_and_float32_outputs_are_not_judged_by_fp16s_range():
    g = torch.Generator().manual_seed(0)
    batch = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
    torch.manual_seed(0)
    model = OverNet()
    rep = ampkit.audit(model, batch, mode="fp16", device="cpu")
    over = next(f for f in rep.findings if f.kind == "overflow" and f.layer == "big")
    assert {la.name: la for la in rep.layers}["big"].fwd_dtype == "float16"
    exec(over.code, {"torch": torch, "model": model})
    fixed = ampkit.audit(model, batch, mode="fp16", device="cpu")
    big = {la.name: la for la in fixed.layers}["big"]
    assert big.fwd_dtype == "float32" and big.fwd_amax > 65504  # still beyond fp16's max, but not in fp16
    assert fixed.first_nonfinite is None and fixed.findings == []


def test_the_callers_model_comes_back_unchanged():
    model, (x, y) = _build("torchvision-resnet18")
    model.eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rep = ampkit.audit(model, (x, y), mode="bf16", steps=2, device="cpu")
    assert rep.completed == 2
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before) and not model.training
    assert all(p.grad is None for p in model.parameters())


class InplaceBug(nn.Module):
    """``h.mul_(2)`` changes a tensor ReLU saved for its backward: plain fp32 training fails too."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x):
        h = torch.sigmoid(self.fc1(x))
        out = self.fc2(h)
        h.mul_(2)
        return out


def test_a_model_that_fails_in_fp32_too_is_said_to_be_the_models_error():
    g = torch.Generator().manual_seed(0)
    batch = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
    torch.manual_seed(0)
    with pytest.raises(RuntimeError, match="a plain float32 training step fails too"):
        ampkit.audit(InplaceBug(), batch, mode="fp16", device="cpu")


def test_predicted_gradient_overflow_the_mode_did_not_show_is_no_finding():
    from ampkit.audit.core import Advice, LayerStats, findings_for

    def stats(nonfinite):
        return [LayerStats("conv", "Conv2d", fwd_amax=1.0, grad_amax=132.0, grad_nonfinite=nonfinite, fwd_dtype="float16")]

    advice = Advice(lambda n: f"model.{n}.float()", "LossScaleOptimizer", "initial_scale")
    quiet, _ = findings_for(stats(0), FP16, "fp16", 512.0, None, False, advice)
    assert quiet == []  # 132 x 512 > 65504 predicted, but the fp16 pass ran finite there
    loud, _ = findings_for(stats(3), FP16, "fp16", 512.0, None, False, advice)
    assert [(f.kind, f.layer, f.level) for f in loud] == [("overflow", "conv", "error")]
