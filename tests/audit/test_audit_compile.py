"""``ampkit audit --compile`` (issue #29, acceptance 4): eager vs torch.compile per module.

The planted module computes ``(x + 256) - 256`` with bf16 autocast: eager rounds ``x + 256`` to
bfloat16 (8 bits of mantissa: steps of 2 at 256, so x is lost), while inductor fuses the two adds
and keeps the intermediate in float32, so the compiled output is x again -- compilation changes the
module's result far beyond bf16's own rounding. A clean MLP has no such module.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import ampkit
from ampkit.audit.config import AuditConfig
from ampkit.errors import UsageError


class Plant(nn.Module):
    def forward(self, x):
        big = torch.full_like(x, 256.0)
        return (x + big) - big


class Net(nn.Module):
    def __init__(self, plant: bool):
        super().__init__()
        self.a, self.act, self.b = nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)
        self.p = Plant() if plant else nn.Identity()

    def forward(self, x):
        return self.b(self.p(self.act(self.a(x))))


def _audit(plant: bool):
    torch.manual_seed(0)
    batch = (torch.randn(8, 8), torch.randint(0, 4, (8,)))
    return ampkit.audit(Net(plant), batch, mode="bf16", device="cpu", compile=True)


def _compiles() -> str | None:
    try:
        torch.compile(lambda t: t + 1)(torch.zeros(2))
    except Exception as exc:  # no C++ compiler here
        return f"{type(exc).__name__}: {exc}"
    finally:
        torch._dynamo.reset()
    return None


def test_planted_module_is_named():
    why = _compiles()
    if why:
        pytest.skip(f"torch.compile unavailable: {why}")
    report = _audit(plant=True)
    flagged = [f for f in report.findings if f.kind == "compile"]
    assert [f.layer for f in flagged] == ["p"], report.findings  # not b, downstream of it
    assert "torch.compiler.disable" in flagged[0].advice and "eager" in flagged[0].advice
    compile(flagged[0].code, "<finding>", "exec")  # the fix parses as Python
    assert "leaf modules compared" in report.note
    doc = report.to_dict()
    assert any(f["kind"] == "compile" and f["layer"] == "p" for f in doc["findings"])
    assert type(report).from_dict(doc).findings[-1].kind == "compile"


def test_config_refuses_what_if_and_fp8_and_non_bool():
    with pytest.raises(UsageError, match="--what-if"):
        AuditConfig(compile=True, what_if=True)
    with pytest.raises(UsageError, match="fp8"):
        AuditConfig(compile=True, mode="fp8")
    with pytest.raises(UsageError, match="True or False"):
        AuditConfig(compile="yes")


def test_clean_model_has_no_compile_finding():
    why = _compiles()
    if why:
        pytest.skip(f"torch.compile unavailable: {why}")
    report = _audit(plant=False)
    assert [f for f in report.findings if f.kind == "compile"] == []
    assert "4 leaf modules compared" in report.note  # a, act, p (Identity), b: the check ran
