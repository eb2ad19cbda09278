"""The doctor's fp8 row (issue #28): where the hardware has no fp8, ``supported`` stays false, and the
row gains ``emulated``, a ``pass`` from a real fp8 step through the engine (torchao's emulation),
``accelerated`` null and a reason saying fp8 numerics can be tried here without speed."""

from __future__ import annotations

import pytest
import torch

from ampkit.doctor.report import DoctorReport, ModeReport
from ampkit.doctor.verdicts import evaluate

pytest.importorskip("torchao")


def test_fp8_on_this_cpu_is_unsupported_but_works_emulated():
    from ampkit.registry import get_backend

    backend = get_backend("torch")
    target = backend.target("cpu")
    calls = []

    def selftest(mode):
        calls.append(mode)
        return backend.selftest(mode, target)

    reports, recommended, _ = evaluate(["fp32", "tf32", "fp8"], lambda m: backend.mode_support(m, target), selftest,
                                       lambda m: None, quick=True, training=lambda m: backend.training_support(m, target))
    fp8, tf32 = reports["fp8"], reports["tf32"]
    assert calls == ["fp32", "fp8"] and recommended is None  # --quick measures nothing: no recommendation (#45)
    assert (fp8.supported, fp8.emulated, fp8.selftest, fp8.accelerated, fp8.speedup) == (False, True, "pass", None, None)
    assert fp8.verdict == "unsupported" and "fp8 numerics can be tried here in torchao's emulation" in fp8.reason
    assert "one fp8 step through the engine (emulated by torchao" in fp8.selftest_detail
    assert (tf32.emulated, tf32.selftest) == (False, "skip")  # nothing emulates TF32
    doc = DoctorReport("torch", "cpu", reports, recommended, "", {}).to_dict()
    assert doc["modes"]["fp8"]["emulated"] is True and doc["modes"]["fp8"]["supported"] is False
    assert DoctorReport.from_dict(doc).modes["fp8"].emulated is True


def test_an_emulated_selftest_that_fails_fails_the_doctor_and_the_table_says_working():
    from rich.console import Console

    from ampkit.render.doctor import render

    reports, rec, _ = evaluate(["fp32", "fp8"], lambda m: (m == "fp32", "hardware"), lambda m: ("fail", "broke")
                               if m == "fp8" else ("pass", ""), lambda m: None, quick=True,
                               training=lambda m: (True, m == "fp8", "emulated here"))
    assert reports["fp8"].reason == "emulated self-test failed: broke"
    assert DoctorReport("torch", "cpu", reports, rec, "", {}).failed
    ok = {"fp32": ModeReport(True, selftest="pass", verdict="recommended"),
          "fp8": ModeReport(False, selftest="pass", verdict="unsupported", emulated=True, reason="emulated here")}
    con = Console(width=250, highlight=False)  # not the environment's COLUMNS: the test reads whole lines
    with con.capture() as cap:
        render(DoctorReport("torch", "cpu", ok, "fp32", "", {}), con)
    assert "working (emulated)" in cap.get() and not DoctorReport("torch", "cpu", ok, "fp32", "", {}).failed


def test_the_engine_selftest_checks_real_fp8_numerics():
    from ampkit.backends.torch.doctor_fp8 import engine_selftest

    status, detail = engine_selftest(torch.device("cpu"))
    assert status == "pass" and "middle Linear as Float8Linear" in detail and "within" in detail
