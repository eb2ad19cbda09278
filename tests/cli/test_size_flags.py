"""Issue 20: --seq-len and --image-size resize the built-in workloads (bench and audit); a flag the
workload does not take, or a value it cannot take, is one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ampkit.errors import UsageError
from ampkit.workload_sizes import size_kwargs
from helpers import assert_usage_error


def _ampkit(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "ampkit", *args], capture_output=True, text=True, timeout=timeout)


def test_image_size_reaches_the_batch_shapes():
    import torch

    from ampkit.backends.torch.workloads import build_workload

    gen = torch.Generator().manual_seed(0)
    wl = build_workload("cnn", None, None, 10, torch.device("cpu"), image_size=8)
    x, y = wl.make_batch(2, torch.device("cpu"), gen)
    assert tuple(x.shape) == (2, 3, 8, 8)
    assert wl.loss((x, y)).ndim == 0  # and the model trains on it
    default = build_workload("cnn", None, None, 10, torch.device("cpu"))
    assert tuple(default.make_batch(2, torch.device("cpu"), gen)[0].shape) == (2, 3, 32, 32)


def test_seq_len_reaches_the_token_batches():
    pytest.importorskip("transformers")
    import torch

    from ampkit.backends.torch.workloads.builtin import _token_batches

    make = _token_batches(1000, 3, mlm=True)
    inputs, _ = make(1, torch.device("cpu"), torch.Generator().manual_seed(0))
    assert tuple(inputs["input_ids"].shape) == (1, 3)
    assert (inputs["labels"] != -100).any()  # a short sequence still has a masked token: the loss is defined


def test_seq_len_builds_bert_with_that_length():
    pytest.importorskip("transformers")
    import torch

    from ampkit.backends.torch.workloads import build_builtin

    wl = build_builtin("bert-base", seq_len=600)  # longer than BERT's 512 positions: the model grows them
    inputs, _ = wl.make_batch(1, torch.device("cpu"), torch.Generator().manual_seed(0))
    assert tuple(inputs["input_ids"].shape) == (1, 600)
    assert wl.model.config.max_position_embeddings == 600


def test_bench_cli_reports_the_shapes_it_ran():
    r = _ampkit("bench", "--framework", "torch", "--device", "cpu", "--workload", "cnn", "--image-size", "8",
                "--modes", "fp32", "--steps", "1", "--warmup", "0", "--json", "-")
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["sample_inputs"] == [3, 8, 8] and doc["config"]["image_size"] == 8
    assert doc["results"][0]["status"] == "ok"


@pytest.mark.parametrize("framework, workload, model, seq, image, needle", [
    ("torch", "cnn", None, 8, None, "--seq-len does not apply to workload 'cnn'"),
    ("torch", "bert-base", None, None, 64, "--image-size does not apply to workload 'bert-base'"),
    ("torch", "mlp", None, None, 8, "takes neither --seq-len nor --image-size"),
    ("torch", "vit_b_16", None, None, 200, "multiple of 16"),
    ("torch", "resnet50", None, None, 16, "at least 32"),
    ("torch", "gpt2", None, 1, None, "at least 2"),
    ("torch", None, "m:f", 8, None, "a --model sets its own input shapes"),
    ("tensorflow", "mlp", None, None, 8, "takes neither"),
    ("tensorflow", "bert-base", None, 0, None, "--seq-len must be >= 1"),
])
def test_size_rules(framework, workload, model, seq, image, needle):
    with pytest.raises(UsageError, match=needle.replace("(", r"\(")):
        size_kwargs(framework, workload, model, seq, image)


def test_size_rules_accept_what_fits():
    assert size_kwargs("torch", "gpt2", None, 64, None) == {"seq_len": 64}
    assert size_kwargs("tensorflow", "cnn", None, None, 16) == {"image_size": 16}
    assert size_kwargs("torch", "mlp", None, None, None) == {}


@pytest.mark.parametrize("args, needle", [
    (["bench", "--workload", "cnn", "--seq-len", "64"], "--seq-len does not apply to workload 'cnn' (torch)"),
    (["bench", "--workload", "cnn", "--image-size", "0"], "--image-size must be >= 1"),
    (["bench", "--workload", "cnn", "--image-size", "2"], "--image-size for cnn must be at least 4"),
    (["bench", "--seq-len", "70000"], "--seq-len must be >= 1 and at most 65,536"),
    (["bench", "--model", "m:f", "--image-size", "8"], "a --model sets its own input shapes"),
    (["audit", "--workload", "cnn", "--seq-len", "8"], "--seq-len does not apply to workload 'cnn'"),
    (["audit", "--image-size", "-3"], "--image-size must be >= 1"),
])
def test_bad_size_is_one_line_and_exit_2(args, needle):
    assert_usage_error(_ampkit(*args, "--framework", "torch", "--device", "cpu", timeout=120), needle)
