"""bf16 judged like fp16, on the case as a user builds it (issue #50 point 4): transformers'
``GPT2LMHeadModel`` from a ``GPT2Config`` with its q/k weights scaled x300, trained on a language the
code generates (``benchmarks/bf16_agreement.py``, its tiny size). The bf16 audit names the attention
whose error grows inside, the what-if keeps it in float32, no instrument offers plain bf16; the same
model unscaled is healthy in bf16 and bf16 is offered there. Parity and a plain loop on this case are
the benchmark's (minutes, not the suite's)."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("transformers")

from test_one_story import OFFERS_BF16  # noqa: E402

import ampkit  # noqa: E402

BENCH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "bf16_agreement.py"
ATTN = "transformer.h.1.attn"


def _case():
    spec = importlib.util.spec_from_file_location("bf16_agreement_case", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _audits(gain: float) -> dict:
    """The fp16 and bf16 audits and the what-if as ``ampkit audit --model FILE:tiny_model --data
    FILE:tiny_data`` runs them: the model built after seeding 0, the first 16 training sequences, the
    default loss (token-level cross-entropy)."""
    import torch

    case = _case()
    size = case.SIZES["tiny"]
    (x, y), _ = case.tiny_data()
    run = {}
    for mode in ("fp16", "bf16", "what_if"):
        torch.manual_seed(0)
        model = case.gpt2_qk(size["n_embd"], size["n_head"], size["seq"], gain)
        kw = {"what_if": True} if mode == "what_if" else {"mode": mode}
        run[mode] = ampkit.audit(model, (x[:16], y[:16]), device="cpu", **kw)
    return run


def _advice(run: dict) -> list[str]:
    texts = [t for f in run["fp16"].findings for t in (f.advice, f.code or "")]
    return texts + [t for p in run["what_if"].what_if.values() for t in (p["advice"], p["code"] or "")]


@pytest.fixture(scope="module")
def scaled():
    return _audits(300.0)


def test_the_bf16_audit_names_the_attention_of_the_scaled_gpt2(scaled):
    bf16 = scaled["bf16"]
    (f,) = [f for f in bf16.findings if f.kind == "precision"]
    assert f.layer == ATTN and "grows inside" in f.advice and f"keep {ATTN} in float32" in f.advice
    errs = {lay.name: lay.rel_error for lay in bf16.layers}
    # measured: c_proj receives ~16% (findings from 12.5%), c_attn gives ~4%: the softmax between amplifies it
    assert errs[ATTN + ".c_proj"] > 0.125 and errs[ATTN + ".c_attn"] * 2 < errs[ATTN + ".c_proj"]
    assert bf16.to_dict()["findings"][0]["severity"] == "note"
    # a forward's error, not a verdict on training: parity measures that (on this case bf16 trains as fp32 does)
    assert f.advice.endswith("whether it costs convergence: `ampkit parity --modes fp32,bf16`)")


def test_the_what_if_keeps_it_in_float32_and_nothing_offers_plain_bf16(scaled):
    bf16 = scaled["what_if"].what_if["bf16"]
    assert bf16["verdict"] == "keep_in_fp32" and bf16["keep_in_fp32"] == [ATTN]
    assert "grows to" in bf16["advice"] and "`ampkit parity --modes fp32,bf16`" in bf16["advice"]
    texts = _advice(scaled)
    assert not [t for t in texts if OFFERS_BF16.search(t.replace("not bf16", ""))], texts


def test_unscaled_the_same_gpt2_is_healthy_in_bf16():
    run = _audits(1.0)
    assert not [f for f in run["bf16"].findings if f.kind == "precision"]
    bf16 = run["what_if"].what_if["bf16"]
    assert bf16["verdict"] == "safe" and bf16["advice"].startswith("bf16 is predicted safe")


@pytest.mark.slow
def test_the_cli_on_the_users_factories_and_data(tmp_path):
    """``ampkit audit --model FILE:tiny_model --data FILE:tiny_data --mode bf16``: the user's path (a bare
    HF model, token ids from a data factory, the default loss), the same finding in the JSON document."""
    out = tmp_path / "bf16.json"
    proc = subprocess.run([sys.executable, "-m", "ampkit", "audit", "--model", f"{BENCH}:tiny_model", "--data",
                           f"{BENCH}:tiny_data", "--mode", "bf16", "--device", "cpu", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert [(f["kind"], f["layer"], f["severity"]) for f in doc["findings"]] == [("precision", ATTN, "note")]
    assert doc["output_rel_error"] > 0.03
