"""Issue #40: no verdict without observation. A what-if stopped before its first step, or fp8 on a
model with no layer an fp8 recipe converts, says "not_measured" (in the JSON, the CLI and the
report) -- never "safe" about nothing."""

from __future__ import annotations

import torch
import torch.nn as nn

import ampkit
from ampkit.audit import driver

X = torch.randn(4, 3, 8, 8)
Y = torch.randint(0, 2, (4,))


class NoLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 2, 3)

    def forward(self, x):
        return self.conv(x).mean(dim=(2, 3))


def test_fp8_with_nothing_to_convert_is_not_measured():
    report = ampkit.audit(NoLinear(), (X, Y), what_if=True, formats=("fp16", "fp8"), device="cpu")
    fp8 = report.what_if["fp8"]
    assert fp8["verdict"] == "not_measured" and fp8["eligible"] == 0
    assert "no matmul layer" in fp8["advice"] and fp8["code"] is None
    assert report.what_if["fp16"]["verdict"] != "not_measured"  # fp16 was observed on the conv


def test_a_what_if_stopped_before_its_first_step_judges_nothing(monkeypatch):
    from rich.console import Console

    from ampkit.render.audit import page_view, render, verdicts

    monkeypatch.setattr(driver, "stop_requested", lambda: True)
    report = ampkit.audit(NoLinear(), (X, Y), what_if=True, device="cpu")
    assert report.steps_completed == 0 and report.interrupted
    assert {p["verdict"] for p in report.what_if.values()} == {"not_measured"}
    assert all("not measured" in p["advice"] for p in report.what_if.values())
    doc = report.to_dict()
    assert doc["what_if"]["fp16"]["verdict"] == "not_measured" and doc["what_if"]["fp16"]["loss_scale_range"] is None
    con = Console(record=True, width=200)
    render(report, con)
    text = con.export_text()
    assert "safe" not in text and "not_measured" in text
    [line] = verdicts(page_view(report, doc))
    assert line["text"] == "fp16 not_measured · bf16 not_measured · fp8 not_measured" and line["tone"] == "neutral"


def test_fp8_audit_with_no_layer_converted_is_not_called_healthy():
    """0 of 0 (no Linear) and 0 of N (none of a convertible size): "not measured", never "healthy"."""
    import pytest
    from rich.console import Console

    from ampkit.render.audit import page_view, render, verdicts

    pytest.importorskip("torchao")
    for model in (NoLinear(), nn.Sequential(nn.Flatten(), nn.Linear(192, 3), nn.ReLU(), nn.Linear(3, 2))):
        report = ampkit.audit(model, (X, Y), mode="fp8", device="cpu")
        doc = report.to_dict()
        assert doc["verdict"] == "not_measured" and "nothing" in doc["not_measured"], doc.get("not_measured")
        con = Console(record=True, width=250)
        render(report, con)
        text = con.export_text()
        assert "healthy" not in text and "not measured:" in text
        [line] = verdicts(page_view(report, None))
        assert line["text"] == "not measured" and line["tone"] == "muted"
