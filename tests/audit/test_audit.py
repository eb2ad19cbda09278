"""ampkit audit with planted models: overflow, underflow, backward-only NaN, clean models."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn

import ampkit
from ampkit.backends.torch.engine import MixedPrecision
from helpers import assert_usage_error


class Scale(nn.Module):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor


class SqrtAtZero(nn.Module):
    """Finite forward (adds 0), NaN in backward: d sqrt(u)/du at u = 0 is inf, times 0 is NaN."""

    def forward(self, x):
        return x + torch.sqrt(torch.relu(x) * 0.0)


def batch(n=8, d=16, classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g), torch.randint(0, classes, (n,), generator=g)


def overflowing():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), Scale(1e5), nn.Linear(32, 4))


def test_forward_overflow_named_in_fp16_and_absent_in_bf16():
    rep = ampkit.audit(overflowing(), batch(), mode="fp16", device="cpu")
    first = rep.first_nonfinite
    assert {k: first[k] for k in ("name", "phase", "step", "op", "in_reference")} == {
        "name": "2", "phase": "forward", "step": 0, "op": "mul", "in_reference": False}
    assert first["reference_amax"] > 65504 and first["inputs_amax"][0] < 10  # x * 1e5: the op and its inputs
    kinds = {(f.layer, f.kind) for f in rep.findings}
    assert ("2", "nonfinite") in kinds and ("2", "overflow") in kinds
    lay = {lay.name: lay for lay in rep.layers}["2"]
    assert lay.fwd_amax > 65504 and lay.fwd_headroom_log2 < 0 and lay.fwd_nonfinite > 0
    assert "autocast" in next(f.advice for f in rep.findings if f.kind == "overflow" and f.layer == "2")
    rep = ampkit.audit(overflowing(), batch(), mode="bf16", device="cpu")
    assert rep.first_nonfinite is None
    assert not any(f.kind in ("nonfinite", "overflow") for f in rep.findings)


def test_tiny_gradients_underflow_at_scale_1_and_not_at_65536():
    def tiny_loss(out, y):
        return nn.functional.cross_entropy(out.float(), y) * 1e-5

    def model():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 4))

    at1 = ampkit.audit(model(), batch(), loss_fn=tiny_loss, mode="fp16", loss_scale=1.0, device="cpu")
    at64k = ampkit.audit(model(), batch(), loss_fn=tiny_loss, mode="fp16", loss_scale=65536.0, device="cpu")
    u1 = {lay.name: lay.grad_underflow_frac for lay in at1.layers}
    u64 = {lay.name: lay.grad_underflow_frac for lay in at64k.layers}
    assert u1["2"] > 0.5 and u1["0"] > 0.5
    for name in u1:
        assert u64[name] <= u1[name]
    assert u64["2"] < 0.05 and u64["0"] < 0.05
    finding = next(f for f in at1.findings if f.kind == "underflow" and f.layer == "2")
    assert "loss scale 1 is too small" in finding.advice and at1.suggested_loss_scale > 1
    assert not any(f.kind == "underflow" for f in at64k.findings)


def test_nan_only_in_backward_is_located_in_backward():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), SqrtAtZero(), nn.Linear(16, 4))
    rep = ampkit.audit(model, batch(), mode="bf16", device="cpu")
    assert rep.first_nonfinite == {"name": "1", "phase": "backward", "step": 0, "op": None, "in_reference": True}
    assert all(lay.fwd_nonfinite == 0 for lay in rep.layers)
    assert rep.reference_nonfinite  # the fp32 reference has it too: a model bug, said so
    assert "not a precision problem" in rep.findings[0].advice


@pytest.mark.parametrize("mode", ["fp16", "bf16"])
def test_clean_model_with_layernorm_and_gelu_has_no_findings(mode):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 64), nn.GELU(),
                          nn.LayerNorm(64), nn.Linear(64, 4))
    rep = ampkit.audit(model, batch(32), mode=mode, steps=2, device="cpu")
    assert rep.findings == [] and rep.first_nonfinite is None, [f.to_dict() for f in rep.findings]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.act = nn.GELU()
        self.unused = nn.Linear(3, 3)

    def forward(self, x):
        return self.act(self.fc(x)) + self.act(x)  # act runs twice


def test_names_are_qualified_and_every_module_that_ran_is_listed():
    torch.manual_seed(0)
    model = nn.Sequential(Block(), nn.Linear(16, 4))
    rep = ampkit.audit(model, batch(), mode="bf16", device="cpu")
    names = [lay.name for lay in rep.layers]
    ran = {"", "0", "0.fc", "0.act", "1"}
    assert set(names) == ran and "0.unused" not in names
    assert set(names) <= {n for n, _ in model.named_modules()}
    assert names.index("0.fc") < names.index("0") < names.index("1") < names.index("")  # completion order
    assert {lay.name: lay.calls for lay in rep.layers}["0.act"] == 2
    assert {lay.name: lay.type for lay in rep.layers}["0.fc"] == "Linear"


def test_inplace_relu_and_batchnorm_work_and_hooks_are_removed():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
    x, y = torch.randn(4, 3, 8, 8), torch.randint(0, 4, (4,))
    rep = ampkit.audit(model, (x, y), mode="bf16", device="cpu")
    assert len(rep.layers) == 7
    for m in model.modules():  # nothing left behind: a model after an audit runs as before
        assert not m._forward_hooks and not m._forward_pre_hooks and not m._backward_hooks


def test_engine_locates_the_overflowing_module_only_when_asked():
    model = overflowing()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    x, y = batch()
    mp = MixedPrecision("fp16", "cpu", model=model)
    with mp.autocast():
        loss = nn.functional.cross_entropy(model(x).float(), y)
    mp.backward(loss)
    r = mp.step(opt, zero_grad=True)
    assert r.skipped and r.overflow is None  # off by default
    assert all(not m._forward_hooks for m in model.modules())  # and nothing installed
    mp.locate_overflows()
    with mp.autocast():
        loss = nn.functional.cross_entropy(model(x).float(), y)
    mp.backward(loss)
    r = mp.step(opt, zero_grad=True)
    assert r.skipped and r.overflow == {"name": "2", "phase": "forward", "op": "mul", "in_reference": False}
    mp.locate_overflows(enabled=False)
    assert all(not m._forward_hooks for m in model.modules())


# ---------------------------------------------------------------- CLI
FACTORY = textwrap.dedent('''
    import torch, torch.nn as nn
    class Scale(nn.Module):
        def forward(self, x):
            return x * 1e5
    def hot():
        return nn.Sequential(nn.Linear(12, 8), Scale(), nn.Linear(8, 3))
''')


def _cli(*args, cwd=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "ampkit", "audit", "--device", "cpu", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd)


def test_cli_json_and_exit_1_on_nonfinite(tmp_path):
    (tmp_path / "hotmodels.py").write_text(FACTORY)
    r = _cli("--model", "hotmodels:hot", "--input-shape", "12", "--num-classes", "3", "--json", "-", cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert {"ampkit_version", "command", "environment", "mode", "loss_scale", "layers", "first_nonfinite",
            "findings"} <= set(doc)
    assert doc["mode"] == "fp16" and doc["loss_scale"] == 65536.0
    assert doc["first_nonfinite"]["name"] == "1" and doc["first_nonfinite"]["phase"] == "forward"
    for lay in doc["layers"]:
        assert {"name", "type", "fwd_amax", "fwd_headroom_log2", "fwd_underflow_frac", "fwd_nonfinite",
                "grad_amax", "grad_underflow_frac", "grad_nonfinite"} <= set(lay)
    assert {f["kind"] for f in doc["findings"]} <= {"overflow", "underflow", "nonfinite", "precision"}
    assert "first inf/NaN" in r.stderr


def test_cli_default_workload_is_clean_and_the_command_never_loads_torch_itself():
    """The audit runs in its child: the command's own process resolves ``auto`` without importing
    torch (2 s of CPU a run), and reads the child's report back without it (the report's versions are
    plain strings, not torch's TorchVersion)."""
    code = ("import sys; from ampkit.cli.main import main; rc = main(sys.argv[1:]); "
            "sys.stderr.write('RC=%s TORCH=%s\\n' % (rc, 'torch' in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code, "audit", "--device", "cpu", "--mode", "bf16", "--json", "-"],
                       capture_output=True, text=True, timeout=600)
    assert "RC=0 TORCH=False" in r.stderr, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["workload"] == "mlp" and doc["findings"] == []
    assert doc["framework"] == "torch" and type(doc["environment"]["framework_version"]) is str


@pytest.mark.parametrize("args,needle", [
    (["--mode", "fp32"], "--mode must be fp16, bf16, fp8 or auto"),
    (["--mode", "fp99"], "unknown precision mode 'fp99'"),
    (["--steps", "0"], "--steps must be >= 1"),
    (["--workload", "alexnet"], "unknown workload 'alexnet'"),
    (["--model", "nope_module:f"], "cannot import module 'nope_module'"),
    (["--loss-scale", "-1"], "--loss-scale must be a positive number"),
    (["--mode", "bf16", "--loss-scale", "1024"], "bf16 trains without loss scaling"),
    (["--device", "gpu"], "unknown device 'gpu'"),
])
def test_bad_input_exit_2_one_line(args, needle):
    assert_usage_error(_cli(*args, timeout=120), needle)


def test_stop_request_keeps_the_steps_that_finished(monkeypatch):
    """The stop request (what the parent's STOP_SIGNAL sets in the audit's process) lands during the
    second optimizer step: that step finishes, the third never starts, the report says so."""
    from ampkit import isolation

    calls = {"n": 0}
    real_step = MixedPrecision.step

    def step_then_stop(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            isolation._on_stop_request(None, None)
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(MixedPrecision, "step", step_then_stop)
    monkeypatch.setattr(isolation, "_stop_requested", False)
    rep = ampkit.audit(overflowing(), batch(), mode="bf16", steps=5, device="cpu")
    assert rep.interrupted and rep.completed == 2 and rep.steps == 5
    assert {lay.calls for lay in rep.layers} == {2}
    doc = rep.to_dict()
    assert doc["interrupted"] is True and doc["steps_completed"] == 2
    assert type(rep).from_dict(json.loads(json.dumps(doc))).completed == 2
    rep = ampkit.audit(overflowing(), batch(), mode="bf16", steps=5, device="cpu")  # still set: nothing runs
    assert rep.completed == 0 and rep.layers == [] and rep.first_nonfinite is None
    from rich.console import Console

    from ampkit.render import audit as render_audit

    con = Console(record=True, width=120)
    render_audit.render(rep, con)
    text = con.export_text()
    assert "0 of 5 step(s), interrupted" in text and "no audited step finished" in text
    assert "┏" not in text and "healthy" not in text  # no empty table, no clean bill of health
    monkeypatch.setattr(isolation, "_stop_requested", False)
    rep = ampkit.audit(overflowing(), batch(), mode="bf16", steps=2, device="cpu")
    assert not rep.interrupted and rep.completed == 2 and rep.to_dict()["steps_completed"] == 2
