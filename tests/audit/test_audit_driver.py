"""The audit's one flow (ampkit.audit.driver) on a backend in plain Python (toy_backend.py): loss
scaling's back-off, the first inf/NaN, a stop between steps, auto, the default workload, a failing
model, the frozen config -- in this process, and from the CLI through the isolated child."""

from __future__ import annotations

import dataclasses
import json

import pytest
import toy_backend as toy

from ampkit import isolation
from ampkit.audit.config import AuditConfig
from ampkit.audit.driver import audit_here
from ampkit.audit.ops import AuditOps, AuditSession, LiveModel
from ampkit.errors import UsageError
from ampkit.registry import _REGISTERED


@pytest.fixture
def backend(monkeypatch):
    monkeypatch.setattr(toy.ToyBackend, "sessions", [])
    monkeypatch.setattr(isolation, "_stop_requested", False)
    return toy.ToyBackend()


def test_the_toy_implements_the_protocol(backend):
    session = backend.audit_session(AuditConfig(workload="line"), backend.target("cpu"))
    assert isinstance(backend, AuditOps) and isinstance(session, AuditSession)


def test_fp16_follows_the_scalers_back_off_and_audits_the_scale_a_default_run_trains_at(backend):
    # head's gradient is 1, the others' 100: at 2**16 head overflows, from 2**15 to 2**10 the others
    rep = audit_here(AuditConfig(workload="steep", steps=2), backend)
    assert rep.loss_scale == 512.0 and rep.initial_loss_scale == 65536.0 and rep.skipped_steps == 7
    assert rep.first_nonfinite is None and rep.findings == [] and not rep.failed
    assert rep.note.startswith("at ToyScaler's initial scale 65536 some gradients overflow fp16")
    assert "skips its first 7 step(s)" in rep.note and rep.note.endswith("; a toy note")
    (session,) = backend.sessions
    retries = [("measure", 0, 65536.0 / 2**i) for i in range(8)]
    expected = [e for m in retries for e in (m, ("rewind",))][:-1]
    expected += [("record",), ("train", 512.0), ("measure", 1, 512.0), ("record",), ("train", 512.0)]
    assert session.log == expected and session.closed
    assert [(lay.name, lay.calls) for lay in rep.layers] == [("enc", 2), ("mid", 2), ("head", 2)]
    assert rep.layers[0].fwd_headroom_log2 == pytest.approx(15.0, abs=0.01)  # finished: 65504 / 2


def test_a_given_scale_is_kept_and_its_overflow_located_in_the_backward(backend):
    rep = audit_here(AuditConfig(workload="steep", loss_scale=65536.0), backend)
    assert rep.loss_scale == 65536.0 and rep.skipped_steps == 0
    # its finding offers bf16, so the audit asked bf16's own audit first (a second session): healthy here
    assert rep.note == "a toy note; bf16 audited too: healthy on this model"
    assert [s.mode for s in backend.sessions] == ["fp16", "bf16"]
    assert rep.first_nonfinite == {"name": "head", "phase": "backward", "step": 0, "op": None,
                                   "in_reference": False} and rep.failed
    assert rep.findings[0].kind == "nonfinite" and "ToyScaler skips such a step" in rep.findings[0].advice


def test_a_forward_overflow_is_no_back_off(backend):
    rep = audit_here(AuditConfig(workload="hot"), backend)
    assert rep.first_nonfinite == {"name": "boom", "phase": "forward", "step": 0, "op": None, "in_reference": False}
    assert rep.loss_scale == 65536.0 and rep.skipped_steps == 0
    assert ("boom", "overflow") in {(f.layer, f.kind) for f in rep.findings}
    assert "keep_in_float32('boom')" in {f.code for f in rep.findings}  # the backend's words for the fix
    assert audit_here(AuditConfig(workload="hot", mode="bf16"), backend).first_nonfinite is None


def test_a_stop_request_keeps_the_steps_that_finished(backend, monkeypatch):
    monkeypatch.setattr(toy.ToyBackend, "stop_at_train", 2)
    rep = audit_here(AuditConfig(workload="line", steps=5), backend)
    assert rep.interrupted and rep.completed == 2 and rep.steps == 5
    assert {lay.calls for lay in rep.layers} == {2}
    rep = audit_here(AuditConfig(workload="line", steps=5), backend)  # still set: nothing runs
    assert rep.interrupted and rep.completed == 0 and rep.layers == [] and backend.sessions[-1].log == []


def test_auto_audits_its_choice_or_bf16_and_says_so(backend, monkeypatch):
    rep = audit_here(AuditConfig(workload="line", mode="auto"), backend)
    assert rep.mode == "bf16" and rep.resolved_from == "auto" and rep.loss_scale == 1.0
    assert rep.note.startswith("auto resolves to fp32 here (the toy has no fast low precision), which has no ")
    assert "audited bf16 instead" in rep.note
    assert rep.note.endswith("; a toy note")
    with pytest.raises(UsageError, match="bf16 trains without loss scaling"):  # auto's bf16 with a scale
        audit_here(AuditConfig(workload="line", mode="auto", loss_scale=1024.0), backend)
    monkeypatch.setattr(toy.ToyBackend, "auto", ("fp16", "fp16 is fast"))
    assert audit_here(AuditConfig(mode="auto", loss_scale=1024.0), backend).mode == "fp16"


def test_the_default_workload_and_sizes_are_the_backends(backend):
    assert audit_here(AuditConfig(), backend).workload == "line"
    with pytest.raises(UsageError, match="unknown workload 'nope' for the toy"):
        audit_here(AuditConfig(workload="nope"), backend)
    with pytest.raises(UsageError, match="takes neither --seq-len nor --image-size"):
        audit_here(AuditConfig(image_size=8), backend)


def test_a_model_failing_under_audit_is_one_line_and_a_live_model_raises_its_own_error(backend):
    with pytest.raises(UsageError) as err:
        audit_here(AuditConfig(model="toy_backend:broken_line"), backend)
    assert str(err.value) == "toy_backend:broken_line failed under audit: RuntimeError: layer fails cannot run"
    with pytest.raises(RuntimeError, match="layer fails cannot run"):
        audit_here(AuditConfig(), backend, LiveModel(toy.broken_line(), name="live"))
    assert all(s.closed for s in backend.sessions) and len(backend.sessions) == 2


@pytest.mark.parametrize("kwargs, needle", [
    ({"mode": "fp32"}, "--mode must be fp16, bf16, fp8 or auto for an audit; received 'fp32'"),
    ({"mode": "fp99"}, "unknown precision mode 'fp99'"),
    ({"steps": 0}, "--steps must be >= 1 and at most 10,000; received 0"),
    ({"batch_size": 0}, "--batch-size must be >= 1"),
    ({"num_classes": 0}, "--num-classes must be >= 1"),
    ({"loss_scale": -1.0}, "--loss-scale must be a positive number"),
    ({"loss_scale": float("inf")}, "--loss-scale must be a positive number"),
    ({"mode": "bf16", "loss_scale": 1024.0}, "bf16 trains without loss scaling; --loss-scale applies to fp16 only"),
    ({"timeout": -5.0}, "--timeout must be a positive number"),
    ({"workload": "mlp", "model": "m:f"}, "give either --workload or --model, not both"),
    ({"model": "m:f", "image_size": 8}, "a --model sets its own input shapes"),
    ({"seq_len": 0}, "--seq-len must be >= 1"),
    ({"input_shape": (2**16, 2**16)}, "values per sample"),
])
def test_the_config_is_checked_once_at_construction(kwargs, needle):
    with pytest.raises(UsageError, match=needle.replace("(", r"\(")):
        AuditConfig(**kwargs)


def test_the_config_is_frozen_and_canonical():
    cfg = AuditConfig(mode="16-mixed")
    assert cfg.mode == "fp16"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.mode = "bf16"
    with pytest.raises(UsageError, match="bf16 trains without"):
        dataclasses.replace(AuditConfig(loss_scale=8.0), mode="bf16")


# ---------------------------------------------------------------- the CLI, through the isolated child
@pytest.fixture
def cli(monkeypatch):
    from ampkit.cli.main import main

    monkeypatch.setitem(_REGISTERED, "toy", "toy_backend:ToyBackend")
    return lambda *args: main(["audit", "--framework", "toy", *args])


def test_cli_runs_a_registered_backend_in_its_child(cli, tmp_path, capsys):
    out = tmp_path / "audit.json"
    assert cli("--workload", "steep", "--steps", "2", "--json", str(out)) == 0
    doc = json.loads(out.read_text())
    assert doc["framework"] == "toy" and doc["workload"] == "steep" and doc["device"] == "toy:0"
    assert doc["loss_scale"] == 512.0 and doc["initial_loss_scale"] == 65536.0 and doc["skipped_steps"] == 7
    assert [lay["name"] for lay in doc["layers"]] == ["enc", "mid", "head"] and doc["steps_completed"] == 2
    assert cli("--workload", "hot", "--json", str(out)) == 1
    assert json.loads(out.read_text())["first_nonfinite"] == {"name": "boom", "phase": "forward", "step": 0, "op": None,
                                                              "in_reference": False}
    capsys.readouterr()
    assert cli("--model", "toy_backend:broken_line") == 2
    err = capsys.readouterr().err
    assert "ampkit: error: toy_backend:broken_line failed under audit: RuntimeError: layer fails cannot run" in err


# ---------------------------------------------------------------- the PyTorch session's sizes and batch
def test_torch_session_builds_the_resized_workload():
    """--image-size reaches the built-in workload through the config (no side channel)."""
    pytest.importorskip("torch")
    from ampkit.registry import get_backend

    backend = get_backend("torch")
    cfg = AuditConfig(workload="cnn", image_size=8, batch_size=1, mode="bf16", device="cpu")
    session = backend.audit_session(cfg, backend.target("cpu"))
    try:
        assert tuple(session.batch[0].shape) == (1, 3, 8, 8) and session.notes == ()
    finally:
        session.close()
