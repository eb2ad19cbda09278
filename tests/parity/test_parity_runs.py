"""ampkit parity --runs (#48 point 3): the engine's run record of a plain loop, compared by mode with
parity's keys; one run per mode gives no verdict; runs of another model are refused."""

from __future__ import annotations

import json

import pytest
import torch

import ampkit
from ampkit.cli.main import main


def _train(mode: str, seed: int, path, model_name="mlp-8-3", steps=12):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(100)  # the same data for every run
    x = torch.randn(96, 8, generator=g)
    y = x[:, :3].argmax(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    mp = ampkit.MixedPrecision(mode, "cpu")
    model = mp.prepare(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    with mp.record(str(path), seed=seed, model=model_name, data="toy") as rec:
        for i in range(steps):
            xb, yb = x[i * 8 % 96:][:8], y[i * 8 % 96:][:8]
            with mp.autocast():
                loss = torch.nn.functional.cross_entropy(model(xb), yb)
            mp.backward(loss)
            result = mp.step(opt, zero_grad=True)
            rec.step(loss, skipped=result.skipped)
        with torch.no_grad():
            acc = (model(x).argmax(1) == y).float().mean()
        rec.evaluate(accuracy=acc)


def test_the_record_holds_mode_seed_losses_times_and_metrics(tmp_path):
    _train("bf16", 3, tmp_path / "r.json")
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["command"] == "run" and doc["mode"] == "bf16" and doc["seed"] == 3 and doc["steps"] == 12
    assert len(doc["loss"]) == len(doc["step_s"]) == 12 and all(t > 0 for t in doc["step_s"])
    assert doc["eval"][-1]["step"] == 12 and 0 <= doc["eval"][-1]["accuracy"] <= 1


def test_runs_compared_by_mode_with_parity_keys(tmp_path, capsys):
    for mode in ("fp32", "bf16"):
        for seed in (0, 1, 2):
            _train(mode, seed, tmp_path / f"{mode}-{seed}.json")
    out = tmp_path / "parity.json"
    code = main(["parity", "--runs", *map(str, sorted(tmp_path.glob("*-*.json"))), "--tolerance", "0.2",
                 "--json", str(out)])
    doc = json.loads(out.read_text())
    assert doc["command"] == "parity" and doc["metric"] == "accuracy" and doc["steps"] == 12
    fp32, bf16 = doc["results"]
    assert fp32["mode"] == "fp32" and fp32["verdict"] == "baseline" and fp32["seeds"] == [0, 1, 2]
    assert bf16["verdict"] in ("pass", "fail", "inconclusive") and set(bf16["equivalence"]) >= {"verdict", "ci"}
    assert bf16["delta_vs_fp32"] is not None and len(bf16["runs"][0]["train_loss"]) == 12
    assert bf16["step_time"]["steps"] == 33 and bf16["step_time"]["speedup_vs_fp32"] > 0
    assert code == (0 if bf16["verdict"] == "pass" else 1)
    # ampkit report draws every run's loss curve on one chart
    from ampkit.parity.report import ParityReport
    from ampkit.render.parity import figure, page_view

    fig = figure(page_view(ParityReport.from_dict(doc)))
    lines = fig.axes[0].get_lines()
    assert len(lines) == 6 and all(len(line.get_ydata()) == 12 for line in lines)
    assert {t.get_text() for t in fig.axes[0].get_legend().get_texts()} == {"fp32", "bf16"}
    html = tmp_path / "report.html"
    assert main(["report", str(out), "--html", str(html)]) == 0
    assert html.read_text().count("<svg") >= 1 and "toy" in html.read_text()


def test_one_run_per_mode_gives_no_verdict(tmp_path):
    _train("fp32", 0, tmp_path / "a.json")
    _train("bf16", 0, tmp_path / "b.json")
    out = tmp_path / "p.json"
    assert main(["parity", "--runs", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--json", str(out)]) == 1
    bf16 = json.loads(out.read_text())["results"][1]
    assert bf16["verdict"] == "inconclusive" and bf16["p_value"] is None and "one run per mode: no verdict" in bf16["reason"]


def test_a_run_of_another_model_is_refused_in_one_line(tmp_path, capsys):
    _train("fp32", 0, tmp_path / "a.json")
    _train("bf16", 0, tmp_path / "b.json", model_name="other")
    assert main(["parity", "--runs", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "its model 'other' differs from" in err[0]


@pytest.mark.parametrize("content, words", [
    ("[1]", "not a run record"), ('{"command": "run", "mode": "bf16"}', "'seed'"),
    ('{"command": "audit", "environment": {}}', "holds no run record"),
    ('{"command": "audit", "run": {"mode": "bf16", "seed": null, "loss": [], "eval": [], "framework": "tensorflow"}}',
     "mp.callback(model, json_path=..., seed=N)")])
def test_a_foreign_document_is_one_line(tmp_path, capsys, content, words):
    (tmp_path / "x.json").write_text(content)
    assert main(["parity", "--runs", str(tmp_path / "x.json")]) == 2
    assert words in capsys.readouterr().err
