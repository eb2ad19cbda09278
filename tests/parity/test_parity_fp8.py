"""parity in fp8 (issue #28): on a CPU fp8 trains in torchao's emulation, and the question parity
answers is the real one there -- does fp8 converge on this model as fp32 does?"""

from __future__ import annotations

import numpy as np
import pytest

import ampkit

pytest.importorskip("torchao")


def test_fp8_parity_on_digits_sized_data_has_its_statistics_and_says_emulated():
    from ampkit.parity.config import ParityConfig
    from ampkit.parity.driver import run
    from ampkit.parity.ops import Arrays, ParityData

    rng = np.random.default_rng(0)
    centers = rng.normal(size=(10, 64)).astype(np.float32) * 2
    y = rng.integers(0, 10, 240)
    x = (centers[y] + rng.normal(size=(240, 64)).astype(np.float32)).astype(np.float32)
    data = ParityData(name="blobs", model="mlp", epochs=1, batch_size=32,
                      source=Arrays(x_train=x[:160], y_train=y[:160], x_test=x[160:], y_test=y[160:]))
    report = run(ParityConfig(modes="fp32,fp8", seeds=2, device="cpu"), "torch", data=data)
    fp8 = next(r for r in report.results if r.mode == "fp8")
    assert fp8.verdict in ("pass", "fail", "inconclusive") and fp8.equivalence["verdict"]
    fp32 = report.results[0]
    assert fp8.seeds == [0, 1] and len(fp8.runs) == 2 and fp8.delta_vs_fp32 is not None
    # fp8 really trained differently from fp32 (not a bf16 run under another name), and it learned
    assert [r.train_loss for r in fp8.runs] != [r.train_loss for r in fp32.runs]
    assert all(r.test_accuracy[-1] > 0.5 for r in fp8.runs)
    assert report.note == "fp8 runs emulated here: its numerics, not its speed"
    assert report.to_dict()["results"][1]["mode"] == "fp8"


def test_parity_refuses_fp8_in_one_line_without_torchao(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchao" else real(name, *a))
    with pytest.raises(ampkit.errors.UsageError, match=r"mode 'fp8' cannot run on cpu: .*pip install 'ampkit\[fp8\]'"):
        ampkit.parity(lambda: None, (np.zeros((4, 64), np.float32), np.zeros(4, np.int64)),
                      (np.zeros((4, 64), np.float32), np.zeros(4, np.int64)), modes=["fp32", "fp8"], seeds=2,
                      epochs=1, device="cpu")
