"""``MixedPrecision("auto")`` takes every keyword and says what it chose and why (issue #10)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import ampkit
from ampkit.backends.torch.engine import MixedPrecision, mixed_precision
from ampkit.precision import TRAINING_MODES

ALL_KEYWORDS = dict(init_scale=8.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=3, accumulation_steps=2)


def tiny():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def run_steps(mp, model, steps=2):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        for _ in range(mp.accumulation_steps):
            x, y = torch.randn(4, 8, generator=g), torch.randint(0, 4, (4,), generator=g)
            with mp.accumulate(), mp.autocast():
                loss = nn.functional.cross_entropy(model(x), y)
            mp.backward(loss)
        r = mp.step(opt, sched, max_grad_norm=1.0, zero_grad=True, metric=1.0)
        assert r.scale == mp.get_scale() and r.grad_norm > 0
    return mp.stats


@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_auto_with_every_keyword_reports_mode_and_reason(device):
    model = tiny()
    mp = ampkit.MixedPrecision("auto", device, model=model, **ALL_KEYWORDS)
    assert mp.mode in TRAINING_MODES
    assert isinstance(mp.reason, str) and mp.reason
    assert mp.accumulation_steps == 2 and mp.model is model
    stats = run_steps(mp, model)
    assert stats["steps"] == 2 and stats["skipped"] == 0


def test_auto_passes_the_scaler_keywords_on_when_it_picks_fp16(monkeypatch):
    monkeypatch.setattr(mixed_precision, "resolve_auto", lambda device: ("fp16", "fp16 chosen by the test"))
    model = tiny()
    mp = MixedPrecision("auto", "cpu", model=model, **ALL_KEYWORDS)
    assert (mp.mode, mp.reason) == ("fp16", "fp16 chosen by the test")
    assert mp.get_scale() == 8.0
    assert run_steps(mp, model, steps=3)["scale"] == 32.0  # growth_factor 4 after growth_interval 3


@pytest.mark.parametrize("mode", ["auto", "bf16", "fp32", "fp16"])
@pytest.mark.parametrize("bad,match", [
    (dict(growth_factor=0.5), "growth_factor must be > 1.0"),
    (dict(backoff_factor=1.5), "backoff_factor must be in"),
    (dict(growth_interval=0), "growth_interval must be an int > 0"),
    (dict(init_scale=float("inf")), "init_scale must be a finite number"),
])
def test_bad_scaler_keywords_are_refused_in_every_mode(mode, bad, match):
    # "auto" must accept or refuse the same arguments whatever it resolves to on this machine
    with pytest.raises(ValueError, match=match):
        MixedPrecision(mode, "cpu", **bad)
