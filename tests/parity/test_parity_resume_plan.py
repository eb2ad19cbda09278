"""Issue #40's hostile round on parity --plan with --resume/--merge: a document that compared a
precision plan resumes without naming the plan again (before: "unknown precision mode 'plan:bf16'"),
and runs of two different plans never mix under one label (the grid's identity does not hold the plan)."""

from __future__ import annotations

import json

import pytest

from ampkit.cli.main import main
from ampkit.errors import UsageError
from ampkit.parity import grid as G
from ampkit.parity.report import ParityReport, ParityResult, RunRecord
from helpers import TINY_DATA_SOURCE

FACTORIES = '''
import torch
import torch.nn as nn


def model():
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
''' + TINY_DATA_SOURCE


def _plan(path, modules):
    path.write_text(json.dumps({"kind": "ampkit-plan", "version": 1, "framework": "torch", "default": "bf16",
                                "modules": modules}))
    return str(path)


def _part(shard, seed, plan):
    runs = {m: RunRecord(m, seed, [1.0], [0.5], [1.0], 0, 0.1) for m in ("fp32", "plan:bf16")}
    results = [ParityResult(m, [seed], {}, {}, None, None, "inconclusive", runs=[runs[m]]) for m in runs]
    results[1].plan = {"kind": "ampkit-plan", "version": 1, "default": "bf16", "modules": plan}
    return ParityReport("d", "cpu", results, {}, 0.01, 1, shard=shard,
                        grid={"modes": ["fp32", "plan:bf16"], "seeds": [0, 1], "identity": {"dataset": "d"}})


def test_merge_refuses_parts_that_ran_two_different_plans(tmp_path):
    paths = []
    for i, plan in ((1, {}), (2, {"0": "fp32"})):
        path = tmp_path / f"part{i}.json"
        path.write_text(json.dumps(_part(f"{i}/2", i - 1, plan).to_dict()))
        paths.append(str(path))
    with pytest.raises(UsageError, match=r"part2.json \(shard 2/2\) ran another plan as plan:bf16 than part1.json"):
        G.merge(paths)


def test_resume_of_a_plan_document_takes_its_plan_and_refuses_another(tmp_path, monkeypatch, capsys):
    (tmp_path / "pfx.py").write_text(FACTORIES)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    same, other = _plan(tmp_path / "a.plan", {"2": "fp32"}), _plan(tmp_path / "b.plan", {})
    base = ["parity", "--device", "cpu", "--model", "pfx:model", "--data", "pfx:data", "--modes", "fp32",
            "--steps", "2"]
    assert main([*base, "--plan", same, "--seeds", "1", "--json", "p.json"]) in (0, 1)
    capsys.readouterr()
    assert main(["parity", "--resume", "p.json", "--seeds", "2"]) in (0, 1)  # no --plan: the document's
    assert "it holds 2 run(s); 2 to run" in capsys.readouterr().err
    doc = json.loads((tmp_path / "p.json").read_text())
    assert {r["mode"]: r["seeds"] for r in doc["results"]} == {"fp32": [0, 1], "plan:bf16": [0, 1]}
    assert main(["parity", "--resume", "p.json", "--plan", other, "--seeds", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"ampkit: error: --plan {other} is not the plan p.json was run with (default bf16, modules "
                   "{'2': 'fp32'}); give that plan, or start a new document"]
