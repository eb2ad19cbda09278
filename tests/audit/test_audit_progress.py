"""The audit says where it is: one line per pass on stderr (a 552-second audit printed nothing)."""

from __future__ import annotations

import io

import pytest
import toy_backend as toy

from ampkit import isolation
from ampkit.audit.config import AuditConfig
from ampkit.audit.driver import audit_here
from ampkit.audit.progress import PassLines


@pytest.fixture
def backend(monkeypatch):
    monkeypatch.setattr(toy.ToyBackend, "sessions", [])
    monkeypatch.setattr(isolation, "_stop_requested", False)
    return toy.ToyBackend()


def test_a_line_per_pass_including_each_back_off(backend):
    lines: list[str] = []
    audit_here(AuditConfig(workload="steep", steps=2), backend, progress=lines.append)
    passes = lines  # after each pass, none before the first: a model failing there ends in one error line
    # step 1 is measured at 65536 and at each halved scale down to 512 (7 skips), step 2 once at 512
    assert len(passes) == 9 and sum("a scaler skips this step" in p for p in passes) == 7
    assert passes[0] == ("step 1/2: float32 reference and fp16 at loss scale 65536 measured; "
                         "a gradient is inf/NaN: a scaler skips this step")
    assert passes[-1] == "step 2/2: float32 reference and fp16 at loss scale 512 measured"


def test_the_library_is_silent_and_the_lines_are_plain_and_flushed(backend, capsys):
    audit_here(AuditConfig(workload="line", mode="bf16"), backend)
    assert capsys.readouterr().err == ""
    out = io.StringIO()
    say = PassLines(out)
    say("step 1/1: measured")
    text = out.getvalue()
    assert text.startswith("ampkit audit: step 1/1: measured (") and text.endswith(" s in all)\n")
    assert "\x1b" not in text  # no terminal codes in a log
