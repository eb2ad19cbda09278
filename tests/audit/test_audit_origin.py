"""Where a run fails, at its origin (issue #34): the module whose own code made the first inf/NaN,
the op, whether float32 fails there too, advice only where it can help, each cause once."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

import ampkit
from ampkit.audit.core import Advice, findings_for
from ampkit.audit.report import LayerStats
from ampkit.audit.whatif import EMIN, ModuleSummary, TensorSummary, fp16_prediction
from ampkit.backends.torch.engine import MixedPrecision
from ampkit.formats import FP16
from origin_models import AttnNet, attn_net, batch, exp_net, ln_net


def _fp16_step(model, x, y):
    """One real fp16 training step (GradScaler at 65536): (skipped, loss finite)."""
    mp = MixedPrecision("fp16", "cpu", model=model)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    with mp.autocast():
        loss = nn.functional.cross_entropy(model(x).float(), y)
    mp.backward(loss)
    return mp.step(opt, zero_grad=True).skipped, bool(torch.isfinite(loss))


def test_audit_names_the_attention_module_and_its_advice_makes_the_step_finite():
    x, y = batch()
    model = attn_net()
    assert model.attn.q(x).abs().max() == 255 and (model.attn.q(x).half().isfinite().all())
    rep = ampkit.audit(model, (x, y), mode="fp16", device="cpu")
    first = rep.first_nonfinite
    assert {k: first[k] for k in ("name", "phase", "op", "in_reference", "received_by")} == {
        "name": "attn", "phase": "forward", "op": "matmul", "in_reference": False, "received_by": "attn.o"}
    assert first["inputs_amax"] == [255.0, 255.0] and first["reference_amax"] == pytest.approx(16 * 255.0**2)
    finding = rep.findings[0]
    assert finding.kind == "nonfinite" and finding.layer == "attn" and "made by matmul" in finding.advice
    assert "or train in bf16" in finding.advice             # float32 computes 1.04e6: within bf16's range
    assert finding.code.startswith("m = model.attn\n")
    assert not any(f.layer == "attn.o" for f in rep.findings)
    # the advice as given, on a fresh model: the fp16 step that was skipped now is finite
    assert _fp16_step(attn_net(), x, y) == (True, False)
    fixed = attn_net()
    exec(finding.code, {"model": fixed, "torch": torch})
    assert _fp16_step(fixed, x, y) == (False, True)


@pytest.mark.slow  # two CLI runs in child processes (~35 s on one core)
def test_cli_names_it_too(tmp_path):
    import origin_models

    (tmp_path / "attnmodels.py").write_text(open(origin_models.__file__).read())
    r = subprocess.run([sys.executable, "-m", "ampkit", "audit", "--device", "cpu", "--model", "attnmodels:attn_net",
                        "--input-shape", "5,16", "--num-classes", "4", "--mode", "fp16", "--json", "-"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["first_nonfinite"]["name"], doc["first_nonfinite"]["op"]) == ("attn", "matmul")
    assert doc["first_nonfinite"]["in_reference"] is False and doc["findings"][0]["layer"] == "attn"
    r = subprocess.run([sys.executable, "-m", "ampkit", "audit", "--device", "cpu", "--model", "attnmodels:attn_net",
                        "--input-shape", "5,16", "--num-classes", "4", "--what-if", "--formats", "fp16", "--json", "-"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    fp16 = json.loads(r.stdout)["what_if"]["fp16"]
    assert fp16["first_overflow"] == "attn" and fp16["keep_in_fp32"] == ["attn"], r.stderr
    assert fp16["code"].startswith("m = model.attn\n")


def test_the_engines_locator_names_it():
    x, y = batch()
    model = attn_net()
    mp = MixedPrecision("fp16", "cpu", model=model)
    mp.locate_overflows()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    with mp.autocast():
        loss = nn.functional.cross_entropy(model(x).float(), y)
    mp.backward(loss)
    r = mp.step(opt, zero_grad=True)
    assert r.skipped and r.overflow == {"name": "attn", "phase": "forward", "op": "matmul", "in_reference": False,
                                        "received_by": "attn.o"}
    mp.locate_overflows(enabled=False)   # its replay hook on the model goes with it
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())


def test_what_if_predicts_it_at_attn():
    rep = ampkit.audit(attn_net(), batch(), what_if=True, formats=["fp16", "bf16"], device="cpu")
    fp16 = rep.what_if["fp16"]
    assert fp16["first_overflow"] == "attn" and fp16["keep_in_fp32"] == ["attn"] and fp16["verdict"] == "keep_in_fp32"
    row = next(m for m in fp16["modules"] if m["name"] == "attn")
    assert row["inner_op"] == "matmul" and row["inner_amax"] == pytest.approx(16 * 255.0**2)
    assert row["fwd_amax"] < 10                              # its output is finite: only its own code overflows
    assert rep.what_if["bf16"]["verdict"] == "safe"
    # below fp16's max, nothing inside is predicted to overflow
    low = ampkit.audit(AttnNet(60.0), batch(), what_if=True, formats=["fp16"], device="cpu")
    assert low.what_if["fp16"]["first_overflow"] is None and low.what_if["fp16"]["keep_in_fp32"] == []


def _no_precision_advice(rep):
    for f in rep.findings:
        assert f.code is None, f.to_dict()
        low = f.advice.lower()
        assert "run it in float32" not in low and "keep" not in low and "train in bf16" not in low, f.advice


@pytest.mark.parametrize("mode", ["fp16", "bf16"])
def test_non_finite_in_float32_too_is_said_and_nothing_else_advised(mode):
    rep = ampkit.audit(exp_net(), _flat(), mode=mode, device="cpu")
    first = rep.first_nonfinite
    assert (first["name"], first["op"], first["in_reference"]) == ("1", "exp", True)
    assert first["inputs_amax"] == [116.0] and rep.reference_nonfinite
    assert "non-finite there too" in rep.findings[0].advice
    _no_precision_advice(rep)


def test_what_if_on_a_model_non_finite_in_float32_advises_no_format():
    rep = ampkit.audit(exp_net(), _flat(), what_if=True, formats=["fp16", "bf16"], device="cpu")
    for p in rep.what_if.values():
        # no format is judged from a float32 run that fails by itself (issue #40: not_measured, never "unsafe")
        assert p["float32_nonfinite"] == "1" and p["verdict"] == "not_measured" and p["keep_in_fp32"] == []
        assert "not a precision problem" in p["advice"] and p["code"] is None and "bf16" not in p["advice"]


def _flat(n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 16, generator=g), torch.randint(0, 4, (n,), generator=g)


def test_a_layernorm_fed_exploding_inputs_names_the_upstream_cause():
    rep = ampkit.audit(ln_net(), _flat(), mode="bf16", device="cpu")
    first = rep.first_nonfinite
    assert (first["name"], first["op"], first["in_reference"]) == ("3", "layer_norm", True)
    f = rep.findings[0]
    assert f.layer == "3" and f.cause["name"] == "1"          # past the ReLU, which passed the values on
    assert f.to_dict()["cause"] == f.cause and "1.2e+37" in f.cause["why"].replace("1.22e+37", "1.2e+37")
    _no_precision_advice(rep)
    # fp16: the 1e37 outputs overflow first, at their producer; float32 fails later anyway: no advice
    rep = ampkit.audit(ln_net(), _flat(), mode="fp16", device="cpu")
    assert (rep.first_nonfinite["name"], rep.first_nonfinite["in_reference"]) == ("1", False)
    assert rep.first_nonfinite["reference_origin"] == {"name": "3", "op": "layer_norm"}
    assert "fp32 reference is non-finite too (in 3)" in rep.findings[0].advice
    _no_precision_advice(rep)


def test_a_statistic_passed_on_unchanged_is_one_finding():
    def lay(name, typ, lost, leaf=True):
        out = LayerStats(name, typ, grad_amax=1e-3, calls=1, leaf=leaf)
        out.count_grad(100, lost * 100, lost * 100)
        return out

    layers = [lay("fc1", "Linear", 0.2), lay("act", "GELU", 0.1), lay("drop", "Dropout", 0.1),
              lay("norm", "Identity", 0.1), lay("fc2", "Linear", 0.3), lay("", "Net", 0.3, leaf=False)]
    for x in layers:
        x.finish(FP16)
    advice = Advice(lambda n: f"keep({n!r})", "GradScaler", "init_scale")
    found, _ = findings_for(layers, FP16, "fp16", 65536.0, None, False, advice)
    under = [f for f in found if f.kind == "underflow"]
    assert [f.layer for f in under] == ["fc1", "act", "fc2"]   # the model, passing on fc2's output, is fc2's
    assert "pass on unchanged through drop, norm" in under[1].advice and "unchanged" not in under[0].advice


def _grads(share_tiny: float, n: int = 10000) -> TensorSummary:
    """Gradients at 2**-10, a share of them at 2**-40 (lost in fp16 below a loss scale of 2**19)."""
    t = TensorSummary(count=n, nonzero=n, amax=2.0**-10)
    t.hist[-10 - EMIN] = n * (1 - share_tiny)
    t.hist[-40 - EMIN] = n * share_tiny
    return t


def test_what_if_range_and_verdict_agree_with_its_own_per_module_shares():
    mods = [ModuleSummary("block.fc", "Linear", leaf=True, calls=1, grad=_grads(0.0)),
            ModuleSummary("block", "Block", leaf=False, calls=1, grad=_grads(0.15))]
    p = fp16_prediction(mods, 65536.0, 65536.0)
    rows = {r["name"]: r for r in p["modules"]}
    assert rows["block"]["grad_lost_frac"] == pytest.approx(0.15)   # what the document shows at 65536
    lo, hi = p["loss_scale_range"]
    assert lo == 2.0**19 and p["verdict"] == "safe_with_scale"       # not "safe" at 65536
    at_lo = fp16_prediction(mods, lo, 65536.0)
    assert all(r["grad_lost_frac"] <= 0.05 for r in at_lo["modules"])
    # a module autocast keeps in float32 holds no fp16 gradients: it does not narrow the range
    mods[1].fwd_low = False
    assert fp16_prediction(mods, 65536.0, 65536.0)["verdict"] == "safe"


class LayerScale(nn.Module):
    """timm ConvNeXt's tail: a float16 conv output times a float32 layer scale (1e-7) is float32, and the
    DropPath(0.) after it passes that float32 tensor on."""

    def __init__(self):
        super().__init__()
        from timm.layers import DropPath

        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.gamma = nn.Parameter(torch.full((8, 1, 1), 1e-7))
        self.drop_path = DropPath(0.0)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.drop_path(self.conv(x) * self.gamma).mean((2, 3)) * 1e7)


def test_what_if_knows_what_autocast_keeps_in_float32_and_agrees_with_the_audit():
    pytest.importorskip("timm")
    g = torch.Generator().manual_seed(0)
    data = torch.randn(8, 3, 8, 8, generator=g), torch.randint(0, 4, (8,), generator=g)
    rep = ampkit.audit(LayerScale(), data, what_if=True, formats=["fp16", "bf16"], device="cpu")
    rows = {r["name"]: r for r in rep.what_if["fp16"]["modules"]}
    assert rows["drop_path"]["autocast_float32"] and rows["drop_path"]["lost_frac"] > 0.5   # tiny, but float32
    assert "drop_path" not in rep.what_if["fp16"]["keep_in_fp32"] + rep.what_if["bf16"]["keep_in_fp32"]
    real = ampkit.audit(LayerScale(), data, mode="fp16", device="cpu")
    assert {lay.name: lay.fwd_dtype for lay in real.layers}["drop_path"] == "float32"
    assert not any(f.layer == "drop_path" for f in real.findings)


def test_gradients_a_containers_own_code_shrinks_are_one_finding_at_it():
    """timm ConvNeXt's blocks: a layer scale (1e-6) in the block's own code multiplies the branch, so every
    module inside gets gradients that fp16 loses while the block's own output gradient (the residual
    path) keeps them: one cause per block, not one warning per module inside it."""
    def lay(name, typ, lost, leaf=True, amax=1e-9):
        out = LayerStats(name, typ, grad_amax=amax, calls=1, leaf=leaf)
        out.count_grad(100, lost * 100, lost * 100)
        out.finish(FP16)
        return out

    layers = [lay("stem", "Conv2d", 0.0, amax=1e-3)]
    for b in ("blocks.0", "blocks.1"):
        layers += [lay(f"{b}.conv_dw", "Conv2d", 0.06), lay(f"{b}.norm", "LayerNorm", 0.42),
                   lay(f"{b}.mlp.fc1", "Linear", 0.12), lay(f"{b}.mlp.act", "GELU", 0.06),
                   lay(f"{b}.mlp.drop1", "Dropout", 0.06), lay(f"{b}.mlp.fc2", "Linear", 0.3),
                   lay(f"{b}.mlp", "Mlp", 0.01, leaf=False, amax=2e-9), lay(b, "ConvNeXtBlock", 0.0, leaf=False, amax=1e-3)]
    advice = Advice(lambda n: f"keep({n!r})", "GradScaler", "init_scale")
    found, _ = findings_for(layers, FP16, "fp16", 65536.0, None, False, advice)
    under = [f for f in found if f.kind == "underflow"]
    assert [f.layer for f in under] == ["blocks.0", "blocks.1"]
    assert "conv_dw 6%, norm 42%, mlp.fc1 12%" in under[0].advice and "shrink 1e+06x" in under[0].advice
    # a container whose output gradients are barely larger (Mlp: its fc2's backward) is not the cause
