"""Verdicts the measurement supports: an output error far beyond the format's that grows gradually
is a model-level finding; float32 gradients that are rounding noise are not "lost"."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import ampkit
from ampkit.audit.model_error import MODEL_UNITS


def batchnorm_chain(depth=14, width=32):
    """A regnet-like stand-in: BatchNorm in train mode over 6 samples, 14 times: each normalization
    amplifies the bf16 rounding it receives a little (less than twice), so the error grows gradually
    (to 25% at the output, modules above the 25% per-module threshold, none doubling its input's error)."""
    torch.manual_seed(0)
    layers = [nn.Linear(16, width)]
    for _ in range(depth):
        layers += [nn.BatchNorm1d(width), nn.ReLU(), nn.Linear(width, width)]
    return nn.Sequential(*layers, nn.Linear(width, 4))


def test_a_gradual_output_error_far_beyond_bf16s_is_a_model_level_finding():
    g = torch.Generator().manual_seed(0)
    batch = torch.randn(6, 16, generator=g), torch.randint(0, 4, (6,), generator=g)
    rep = ampkit.audit(batchnorm_chain(), batch, mode="bf16", device="cpu")
    unit = 2.0**-8  # bf16's rounding unit
    assert rep.output_rel_error > MODEL_UNITS * unit  # 17%: beyond any rounding a deep network costs in bf16
    (f,) = rep.findings  # no module doubles its input's error: the model-level finding alone
    assert f.kind == "precision" and f.layer == "" and f.level == "note"
    assert f"differs from float32 by {rep.output_rel_error:.1%} under bf16" in f.advice
    first = next(lay for lay in rep.layers if lay.leaf and lay.rel_error > MODEL_UNITS * unit)
    assert f"first at {first.type} {first.name} (" in f.advice
    assert "grows gradually" in f.advice and f"keep the modules from {first.name} on in float32" in f.advice
    fp16 = ampkit.audit(batchnorm_chain(), batch, mode="fp16", device="cpu")  # 3 more bits: several times less
    assert fp16.output_rel_error < rep.output_rel_error / 4


def test_a_shallow_model_within_the_formats_error_has_no_such_finding():
    g = torch.Generator().manual_seed(0)
    batch = torch.randn(6, 16, generator=g), torch.randint(0, 4, (6,), generator=g)
    rep = ampkit.audit(batchnorm_chain(depth=2), batch, mode="bf16", device="cpu")
    assert rep.output_rel_error < MODEL_UNITS * 2.0**-8 and rep.findings == []


class OneTokenAttention(nn.Module):
    """timm's Attention (qkv, q_norm/k_norm Identity, fused sdpa) over a single token, as mobilevit_xxs's
    last stage runs at 64 px: the true q/k gradients are exactly zero, float32's are rounding noise."""

    def __init__(self, dim=64, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv, self.q_norm, self.k_norm, self.proj = nn.Linear(dim, 3 * dim), nn.Identity(), nn.Identity(), nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        return self.proj(nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, c))


class OneTokenNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.attn, self.head = nn.Linear(16, 64), OneTokenAttention(), nn.Linear(64, 4)

    def forward(self, x):
        return self.head(self.attn(self.embed(x).unsqueeze(1)).squeeze(1))


def test_float32_rounding_noise_is_not_lost_gradient(monkeypatch):
    g = torch.Generator().manual_seed(0)
    batch = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
    torch.manual_seed(0)
    rep = ampkit.audit(OneTokenNet(), batch, mode="fp16", device="cpu")
    lays = {lay.name: lay for lay in rep.layers}
    q = lays["attn.q_norm"]
    assert q.grad_lost_frac > 0.05  # fp16 at 65536 "loses" 18% of them...
    assert q.grad_noise_frac == 1.0 and q.grad_signal_lost_frac == 0.0  # ...all of them noise against float64
    assert lays["attn.qkv"].grad_noise_frac > 0.5 and lays["embed"].grad_noise_frac is None  # checked where needed
    assert rep.findings == []
    # without the float64 check the same measurement would be three underflow warnings and "train in bf16"
    from ampkit.backends.torch import audit as torch_audit

    monkeypatch.setattr(torch_audit, "noise_shares", lambda *a, **k: {})
    torch.manual_seed(0)
    rep = ampkit.audit(OneTokenNet(), batch, mode="fp16", device="cpu")
    # (reported once per cause, at the module whose own code holds them: the Identity q_norm/k_norm pass them on)
    assert {f.layer for f in rep.findings if f.kind == "underflow"} & {"attn", "attn.qkv", "attn.q_norm", "attn.k_norm"}


def test_the_what_if_knows_rounding_noise_too_and_agrees_with_the_audit(monkeypatch):
    """issue #34 (8a): the what-if called fp16 'unsafe' and fp8 'keep qkv out' for gradients that are float32
    rounding noise; with the same float64 check as the audit it agrees with the real fp16 audit (no finding)."""
    g = torch.Generator().manual_seed(0)
    batch = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
    torch.manual_seed(0)
    rep = ampkit.audit(OneTokenNet(), batch, what_if=True, device="cpu")
    fp16, fp8 = rep.what_if["fp16"], rep.what_if["fp8"]
    assert fp16["verdict"] == "safe" and fp16["loss_scale_range"][0] <= 65536 <= fp16["loss_scale_range"][1]
    assert fp8["verdict"] == "safe" and fp8["keep_in_fp32"] == []
    rows = {r["name"]: r for r in fp16["modules"]}
    assert rows["attn.q_norm"]["grad_noise"] == 1.0 and rows["embed"]["grad_noise"] is None
    # without the float64 check: the old verdicts (the test can fail)
    from ampkit.backends.torch.numerics import noise

    monkeypatch.setattr(noise, "noise_shares", lambda *a, **k: {})
    torch.manual_seed(0)
    rep = ampkit.audit(OneTokenNet(), batch, what_if=True, device="cpu")
    assert rep.what_if["fp16"]["verdict"] == "unsafe" and rep.what_if["fp8"]["keep_in_fp32"] == ["attn.qkv"]


@pytest.mark.slow
def test_timm_mobilevit_xxs_at_64px_has_no_underflow_from_noise():
    """The issue's model: 9 underflow warnings on stage 4's attn.qkv / q_norm / k_norm, all of them float32
    rounding noise of attention over one token (measured here: 0 findings, the 9 modules' lost gradients all noise)."""
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    model = timm.create_model("mobilevit_xxs", pretrained=False, num_classes=10)
    g = torch.Generator().manual_seed(0)
    batch = torch.randn(4, 3, 64, 64, generator=g), torch.randint(0, 10, (4,), generator=g)
    rep = ampkit.audit(model, batch, mode="fp16", device="cpu")
    checked = [lay for lay in rep.layers if lay.grad_noise_frac is not None]
    assert {lay.name.rsplit(".", 1)[-1] for lay in checked} == {"qkv", "q_norm", "k_norm"}
    assert all(lay.grad_signal_lost_frac == 0.0 and lay.grad_lost_frac > 0.05 for lay in checked)
    assert not [f for f in rep.findings if f.kind == "underflow"]
