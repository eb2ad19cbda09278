"""Issue #36 with PyTorch, in the library: plans that the engine applies and the audit proves.

The planted models (planted.py): attention whose scores overflow float16 inside its own forward, a
leaf that cancels catastrophically in bf16, a Linear whose input has an outlier channel for fp8.
"""

from __future__ import annotations

import copy
import json
import pickle

import plan_models as planted
import pytest
import torch
import torch.nn.functional as F

import ampkit
from ampkit.plan import Plan, load_plan, propose_plan


def _train(model, mp, x, y, steps=8):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    out = []
    for _ in range(steps):
        with mp.autocast():
            loss = F.cross_entropy(model(x), y)
        mp.backward(loss)
        out.append((float(loss.detach()), mp.step(opt, zero_grad=True).skipped))
    return out


def _linear_dtypes(model):
    seen = {}
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear):
            mod.register_forward_hook(lambda m, a, o, n=name: seen.__setitem__(n, o.dtype))
    return seen


# ---------------------------------------------------------------- acceptance 1: fp16, attention scores
def test_attention_overflow_goes_nonfinite_without_a_plan():
    x, y = planted.attention_data()
    model = planted.attention_net()
    losses = _train(model, ampkit.MixedPrecision("fp16", "cpu", model=model), x, y, steps=3)
    assert all(loss != loss and skipped for loss, skipped in losses)  # NaN, every step skipped


def test_audit_proposes_the_module_it_names_and_keeping_attn_trains_finite(tmp_path):
    x, y = planted.attention_data()
    report = ampkit.audit(planted.attention_net(), (x, y), mode="fp16", device="cpu")
    named = report.first_nonfinite["name"]
    plan = propose_plan(report, "torch")
    # the plan keeps exactly the module the audit names (the attention module, whose own q @ k^T overflows)
    assert plan.default == "fp16" and plan.modules == {named: "fp32"}
    assert named == "attn"
    path = tmp_path / "plan.json"
    plan.save(str(path))
    for mp_of in (lambda m: ampkit.MixedPrecision("fp16", "cpu", keep_fp32=["attn"], model=m),
                  lambda m: ampkit.MixedPrecision.from_plan(str(path), "cpu", model=m)):
        model = planted.attention_net()
        dtypes = _linear_dtypes(model)
        mp = mp_of(model)
        losses = _train(model, mp, x, y)
        assert all(loss == loss and abs(loss) < 10 for loss, _ in losses)
        assert not any(skipped for _, skipped in losses[1:])  # no skipped step after the first (warm-up)
        assert dtypes == {"embed": torch.float16, "attn.q": torch.float32, "attn.k": torch.float32,
                          "attn.v": torch.float32, "head": torch.float16}
        assert all(p.dtype == torch.float32 for p in model.parameters())
        assert mp.verify() == []
        assert mp.plan.modules == {"attn": "fp32"} and mp.plan.default == "fp16"


def test_glob_and_class_patterns_and_outputs_stay_float32():
    x, _ = planted.attention_data()
    for pattern in ("ScoresAttention", "at*"):
        model = planted.attention_net()
        got = {}
        model.attn.register_forward_hook(lambda m, a, o, got=got: got.update(out=o.dtype))
        mp = ampkit.MixedPrecision("fp16", "cpu", keep_fp32=[pattern], model=model)
        with mp.autocast():
            out = model(x)
        assert got["out"] == torch.float32 and out.dtype == torch.float16  # head casts it back (autocast)
        assert torch.isfinite(out).all()


def test_verify_flags_a_kept_layer_that_ran_in_float16():
    x, _ = planted.attention_data()
    model = planted.attention_net()
    mp = ampkit.MixedPrecision("fp16", "cpu", keep_fp32=["attn"], model=model)
    mp._islands.remove()  # the island's hooks gone: its layers run in float16 as declared-but-not-applied
    mp._islands.applied = True
    with mp.autocast():
        model(x)
    found = mp.verify()
    assert [f["check"] for f in found] == ["plan"]
    assert "attn.q" in found[0]["where"] and found[0]["actual"].startswith("float16")


def test_the_engine_copies_and_the_island_survives_an_exception():
    model = planted.attention_net()
    mp = ampkit.MixedPrecision("fp16", "cpu", keep_fp32=["attn"], model=model)
    again = pickle.loads(pickle.dumps(mp))
    assert again.plan.modules == {"attn": "fp32"} and copy.deepcopy(mp).plan.keep_fp32 == ["attn"]
    with pytest.raises(RuntimeError):
        with mp.autocast():
            model(torch.zeros(2, 6, 5))  # wrong width: the forward raises inside the island
    with mp.autocast():
        assert torch.is_autocast_enabled("cpu")  # the island's autocast(enabled=False) was left


def test_keep_fp32_needs_the_model():
    mp = ampkit.MixedPrecision("fp16", "cpu", keep_fp32=["attn"])
    with pytest.raises(ampkit.UsageError, match="needs|give it"):
        mp.autocast()


# ---------------------------------------------------------------- acceptance 2: bf16, cancellation
def test_bf16_cancellation_back_to_fp32_level_in_that_module():
    g = torch.Generator().manual_seed(0)
    batch = (torch.randn(64, 16, generator=g), torch.randint(0, 4, (64,), generator=g))
    model = planted.cancel_net()
    before = ampkit.audit(model, batch, mode="bf16", device="cpu")
    assert [(f.layer, f.kind) for f in before.findings] == [("cancel", "precision")]
    plan = propose_plan(before, "torch")
    assert plan.modules == {"cancel": "fp32"}
    after = ampkit.audit(model, batch, mode="bf16", device="cpu", plan=plan)
    err = {lay.name: lay.rel_error for lay in after.layers}
    dtypes = {lay.name: lay.fwd_dtype for lay in after.layers}
    assert before.layers[0].rel_error > 1.0 and err["cancel"] < 1e-6 and after.findings == []
    assert dtypes["cancel"] == "float32" and dtypes["body"] == dtypes["head"] == "bfloat16"


# ---------------------------------------------------------------- acceptance 3: fp8, outlier channel
def test_fp8_plan_keeps_the_outlier_layer_out_and_the_audit_is_clean():
    pytest.importorskip("torchao")
    g = torch.Generator().manual_seed(0)
    batch = (torch.randn(64, 32, generator=g), torch.randint(0, 16, (64,), generator=g))
    model = planted.outlier_net()
    before = ampkit.audit(model, batch, mode="fp8", device="cpu")
    assert [f.layer for f in before.findings if f.advice.startswith("fp8:")] == ["mid"]
    plan = propose_plan(before, "torch")
    assert plan.default == "fp8" and plan.modules == {"mid": "bf16"}
    after = ampkit.audit(model, batch, mode="fp8", device="cpu", plan=plan)
    assert not [f for f in after.findings if f.advice.startswith("fp8:")]
    converted = {lay.name: lay.fp8["converted"] for lay in after.layers if lay.fp8}
    assert converted == {"first": False, "mid": False, "a": True, "b": True, "last": False}
    mp = ampkit.MixedPrecision.from_plan(plan.to_dict(), "cpu")
    mp.prepare(planted.outlier_net())
    reasons = {d["name"]: d["reason"] for d in mp.fp8_layers}
    assert "kept out of fp8 by the plan (entry 'mid': bf16)" == reasons["mid"]


# ---------------------------------------------------------------- acceptance 6: bad plans, in the library
@pytest.mark.parametrize("doc, needle", [
    ({"modules": {"nope": "fp32"}}, "entry 'nope' matches no module"),
    ({"modules": {"blocks.*": "fp32"}}, "entry 'blocks.*' matches no module"),
    ({"modules": {"attn": "fp7"}}, "entry 'attn': unknown or unsupported mode 'fp7'"),
    ({"modules": {"attn": "bf16"}}, "entry 'attn': unknown or unsupported mode 'bf16'"),
    ({"framework": "tensorflow"}, "is for framework 'tensorflow'"),
    ({"default": "fp9"}, "\"default\": unknown or unsupported mode 'fp9'"),
    ({"kind": "other"}, "\"kind\" must be 'ampkit-plan'"),
])
def test_bad_plans_are_one_usage_error_naming_the_entry(doc, needle):
    full = {"kind": "ampkit-plan", "version": 1, "framework": "torch", "default": "fp16", "modules": {}, **doc}
    with pytest.raises(ampkit.UsageError) as err:
        ampkit.MixedPrecision.from_plan(full, "cpu", model=planted.attention_net())
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_malformed_file(tmp_path):
    path = tmp_path / "p.json"
    path.write_text("{not json")
    with pytest.raises(ampkit.UsageError, match="not JSON"):
        load_plan(str(path))
    assert load_plan({"kind": "ampkit-plan", "version": 1, "default": "bf16"}).to_dict()["framework"] is None
    assert json.loads(json.dumps(Plan("fp16", {"a": "fp32"}, "torch").to_dict()))["modules"] == {"a": "fp32"}


@pytest.mark.slow
def test_islands_under_torch_compile_and_data_parallel():
    x, _ = planted.attention_data()
    for wrap in (torch.compile, torch.nn.DataParallel):
        model = wrap(planted.attention_net())
        mp = ampkit.MixedPrecision("fp16", "cpu", keep_fp32=["attn"], model=model)  # the user's own names
        with mp.autocast():
            out = model(x)
        assert torch.isfinite(out).all() and out.dtype == torch.float16
