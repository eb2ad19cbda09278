"""Factories that forgive (#48): PATH/TO/FILE.py:FACTORY beside MODULE:FACTORY, messages that say
where ampkit looked and what was meant, a slow import named once, a several-input model pointed to
ampkit.Workload, and bench --data timing the user's own batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ampkit.errors import UsageError
from ampkit.factory import SLOW_IMPORT_S, load_factory, split_spec
from ampkit.suggest import nearest

SRC = str(Path(__file__).resolve().parents[2] / "src")

TRAIN = textwrap.dedent('''
    import os

    import torch
    from torch import nn

    IMPORTS = os.environ.get("FACTORY_IMPORT_LOG")
    if IMPORTS:  # one line per import, with the process that imported
        with open(IMPORTS, "a") as f:
            f.write(f"{os.getpid()}\\n")
    if os.environ.get("FACTORY_IMPORT_SLEEP"):
        import time

        time.sleep(float(os.environ["FACTORY_IMPORT_SLEEP"]))


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(12, 3)

        def forward(self, x):
            return self.fc(x)


    class TwoInputs(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(12, 3)

        def forward(self, ids, feats):
            return self.fc(feats)


    def two():
        return TwoInputs()


    def data():
        g = torch.Generator().manual_seed(0)
        x = torch.randn(40, 12, generator=g)
        return (x, x[:, :3].argmax(1)), (x[:8], x[:8, :3].argmax(1))
''')


@pytest.fixture
def project(tmp_path, monkeypatch):
    """tmp/elsewhere/<unique>.py, the working folder tmp/ (the module is not on the path from there)."""
    name = f"train_{os.getpid()}_{len(list(tmp_path.iterdir()))}_{tmp_path.name.replace('-', '_')}"
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / f"{name}.py").write_text(TRAIN)
    monkeypatch.chdir(tmp_path)
    yield tmp_path, name
    sys.modules.pop(name, None)
    for p in (str(tmp_path / "elsewhere"), str(tmp_path)):
        while p in sys.path:
            sys.path.remove(p)


def test_a_file_path_loads_from_another_folder_once(project, monkeypatch):
    tmp, name = project
    log = tmp / "imports.log"
    monkeypatch.setenv("FACTORY_IMPORT_LOG", str(log))
    net = load_factory(f"./elsewhere/{name}.py:Net")
    assert net().fc.in_features == 12
    assert load_factory(f"elsewhere/{name}.py:data") is not None  # the same file again: not re-imported
    assert log.read_text().split() == [str(os.getpid())]
    assert split_spec(f"./elsewhere/{name}.py:Net") == (f"./elsewhere/{name}.py", "Net")


def test_no_module_says_where_it_looked_and_finds_the_file(project):
    tmp, name = project
    with pytest.raises(UsageError) as exc:
        load_factory(f"{name}:Net")
    text = str(exc.value)
    assert f"No module named {name!r}" in text and str(tmp) in text and "\n" not in text
    assert f"there is ./elsewhere/{name}.py: --model ./elsewhere/{name}.py:Net" in text
    with pytest.raises(UsageError, match="PYTHONPATH=path/to/folder"):
        load_factory("surely_not_a_module_anywhere:f")
    with pytest.raises(UsageError, match=r"no file 'missing/x.py' \(looked for .*missing/x.py"):
        load_factory("missing/x.py:f")


def test_an_unknown_factory_lists_the_callables_and_the_nearest(project):
    _, name = project
    with pytest.raises(UsageError) as exc:
        load_factory(f"elsewhere/{name}.py:Nett")
    text = str(exc.value)
    assert "did you mean 'Net'?" in text and "its callables: Net, TwoInputs, data, two" in text
    assert "torch" not in text.split("its callables:")[1]  # imported names are not its own


def test_nearest_names():
    assert nearest("resnet5", ["mlp", "cnn", "resnet50", "vit_b_16", "bert-base", "gpt2"]) == "resnet50"
    assert nearest("bf61", ["fp32", "tf32", "fp16", "bf16", "fp8", "auto"]) == "bf16"
    assert nearest("Nett", ["Net", "data"]) == "Net"
    assert nearest("alexnet", ["mlp", "cnn", "resnet50"]) is None


def test_unknown_workload_mode_and_dataset_suggest_the_nearest():
    from ampkit.backends.torch.workloads import check_builtin
    from ampkit.parity.datasets import DATASETS
    from ampkit.precision import parse_mode

    with pytest.raises(UsageError, match=r"unknown workload 'resnet5'; did you mean 'resnet50'\? built-in workloads:"):
        check_builtin("resnet5")
    with pytest.raises(UsageError, match=r"unknown precision mode 'fp61'; did you mean 'fp16'\?"):
        parse_mode("fp61")
    with pytest.raises(UsageError, match=r"unknown workload 'alexnet'; built-in workloads:"):
        check_builtin("alexnet")
    from ampkit.parity.datasets import check_dataset

    first = list(DATASETS)[0]
    with pytest.raises(UsageError, match=rf"did you mean {first!r}\?"):
        check_dataset(first[:-1] + "x")


def test_a_model_with_two_inputs_is_pointed_to_workload(project):
    from ampkit.backends.torch.workloads import build_user_workload

    _, name = project
    with pytest.raises(UsageError) as exc:
        build_user_workload(f"elsewhere/{name}.py:two", (12,))
    text = str(exc.value)
    assert "forward needs 2 inputs (ids, feats)" in text and "ampkit.Workload(model=TwoInputs()" in text
    assert "make_batch=lambda n, device, gen: ((ids(n, gen), feats(n, gen)), targets(n, gen))" in text


def _ampkit(args, cwd, **env):
    e = {**os.environ, "PYTHONPATH": SRC, "CUDA_VISIBLE_DEVICES": "", **env}
    return subprocess.run([sys.executable, "-m", "ampkit", *args], cwd=cwd, env=e, capture_output=True, text=True,
                          timeout=600)


def test_bench_from_another_folder_times_the_users_data(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "train.py").write_text(TRAIN)
    out = tmp_path / "bench.json"
    r = _ampkit(["bench", "--model", "./elsewhere/train.py:Net", "--data", "./elsewhere/train.py:data",
                 "--modes", "fp32", "--steps", "2", "--warmup", "0", "--batch-size", "16", "--json", str(out)], tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["input"]["kind"] == "data" and doc["input"]["from"] == "./elsewhere/train.py:data"
    assert doc["input"]["shape"] == [16, 12] and doc["input"]["targets"] == {"dtype": "int64", "shape": [16]}
    assert doc["sample_inputs"] == [12] and doc["results"][0]["batch_size"] == 16 and doc["results"][0]["status"] == "ok"


@pytest.mark.slow
def test_a_slow_import_is_named_once_before_the_modes_and_imported_once_per_process(tmp_path):
    (tmp_path / "slowtrain.py").write_text(TRAIN)
    log = tmp_path / "imports.log"
    r = _ampkit(["bench", "--model", "slowtrain:Net", "--input-shape", "12", "--num-classes", "3", "--modes", "fp32,bf16", "--steps", "2",
                 "--warmup", "0"], tmp_path, FACTORY_IMPORT_SLEEP=str(SLOW_IMPORT_S + 0.3),  # just over the threshold
                 FACTORY_IMPORT_LOG=str(log))
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    named = [i for i, line in enumerate(lines) if line.startswith("ampkit: importing slowtrain (for --model slowtrain:Net) took")]
    assert len(named) == 1, r.stderr
    assert 'belongs under `if __name__ == "__main__":`' in lines[named[0]]
    first_mode = next(i for i, line in enumerate(lines) if "fp32" in line and "starting" in line)
    assert named[0] < first_mode
    pids = log.read_text().split()
    assert len(pids) == len(set(pids)) >= 3, pids  # the probe and one process per mode, each imports once
