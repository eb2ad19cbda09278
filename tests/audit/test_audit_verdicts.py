"""Verdicts the measurement supports: an output error far beyond the format's that grows gradually
is a model-level finding; float32 gradients that are rounding noise are not "lost"."""

from __future__ import annotations

import torch
import torch.nn as nn

import ampkit
from ampkit.audit.model_error import MODEL_UNITS


def batchnorm_chain(depth=13, width=32):
    """A regnet-like stand-in: BatchNorm in train mode over 6 samples, 13 times: each normalization
    amplifies the bf16 rounding it receives a little (less than twice), so the error grows gradually."""
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
    fp16 = ampkit.audit(batchnorm_chain(), batch, mode="fp16", device="cpu")  # 3 more bits: ~7x less, still beyond
    assert fp16.output_rel_error < rep.output_rel_error / 4
    assert [(x.layer, x.kind) for x in fp16.findings] == [("", "precision")]


def test_a_shallow_model_within_the_formats_error_has_no_such_finding():
    g = torch.Generator().manual_seed(0)
    batch = torch.randn(6, 16, generator=g), torch.randint(0, 4, (6,), generator=g)
    rep = ampkit.audit(batchnorm_chain(depth=2), batch, mode="bf16", device="cpu")
    assert rep.output_rel_error < MODEL_UNITS * 2.0**-8 and rep.findings == []
