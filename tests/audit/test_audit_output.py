"""A float16/bfloat16 output layer is an audit finding (PyTorch); autocast's own fp16 logits are not."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import ampkit


class HalfOut(nn.Module):
    """Returns float16 logits whatever the mode: float16 in the float32 reference too."""

    def __init__(self):
        super().__init__()
        self.body, self.head = nn.Linear(16, 32), nn.Linear(32, 4)

    def forward(self, x):
        return self.head(torch.relu(self.body(x))).half()


def batch():
    g = torch.Generator().manual_seed(0)
    return torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)


def contract(rep):
    return [f for f in rep.findings if f.kind == "contract"]


@pytest.mark.parametrize("mode", ["fp16", "bf16"])
def test_a_model_returning_float16_is_a_finding_and_its_code_fixes_it(mode):
    torch.manual_seed(0)
    model = HalfOut()
    (f,) = contract(ampkit.audit(model, batch(), mode=mode, device="cpu"))
    assert f.layer == "head" and f.level == "warning"
    assert "found float16" in f.advice and "even in the float32 reference" in f.advice
    exec(f.code, {"model": model, "torch": torch})  # the advice's code, applied to the model object
    assert contract(ampkit.audit(model, batch(), mode=mode, device="cpu")) == []


def test_softmax_probabilities_in_float16_are_a_finding():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 4), nn.Softmax(-1))

    def nll(out, y):
        return nn.functional.nll_loss(torch.log(out.float()), y)

    rep = ampkit.audit(model, batch(), loss_fn=nll, mode="fp16", device="cpu")
    if {lay.name: lay for lay in rep.layers}["1"].fwd_dtype != "float16":
        pytest.skip("autocast runs softmax in float32 on this device: no float16 output to flag")
    (f,) = contract(rep)
    assert f.layer == "1" and "probabilities" in f.advice and "-inf" in f.advice
    exec(f.code, {"model": model, "torch": torch})
    assert contract(ampkit.audit(model, batch(), loss_fn=nll, mode="fp16", device="cpu")) == []


def test_autocasts_own_float16_logits_are_no_finding():
    torch.manual_seed(0)
    rep = ampkit.audit(nn.Sequential(nn.Linear(16, 4)), batch(), mode="fp16", device="cpu")
    assert rep.layers[-1].fwd_dtype == "float16" and rep.findings == []
