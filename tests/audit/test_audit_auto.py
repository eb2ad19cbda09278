"""audit --mode auto: auto's choice when it is fp16 or bf16, else bf16, and the report says so."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ampkit.audit.core import audit_mode_for_auto
from ampkit.audit.report import AuditReport


@pytest.mark.parametrize("resolved, audited", [("bf16", "bf16"), ("fp16", "fp16"), ("fp32", "bf16"), ("tf32", "bf16")])
def test_auto_audits_its_choice_or_bf16(resolved, audited):
    mode, note = audit_mode_for_auto(lambda: (resolved, "the reason"))
    assert mode == audited and "the reason" in note and f"auto resolves to {resolved}" in note
    if resolved != audited:
        assert "audited bf16 instead" in note


def test_cli_auto_on_the_cpu():
    r = subprocess.run([sys.executable, "-m", "ampkit", "audit", "--framework", "torch", "--device", "cpu",
                        "--mode", "auto", "--json", "-"], capture_output=True, text=True, timeout=300)
    assert r.returncode in (0, 1), r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["resolved_from"] == "auto" and doc["mode"] in ("fp16", "bf16") and doc["note"]
    assert "--mode auto: auto resolves to" in r.stderr
    assert AuditReport.from_dict(doc).note == doc["note"]
