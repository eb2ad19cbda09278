"""bf16 judged like fp16 (issue #50 point 4): GPT-2 from a transformers config with its q/k weights scaled
x300. bf16's attention output is 14% from float32's (its input 0.45%): the bf16 audit names the attention,
the what-if keeps it in float32, and no instrument advises plain bf16 on this model."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from test_one_story import OFFERS_BF16  # noqa: E402

import ampkit  # noqa: E402
import story_models as sm  # noqa: E402

ATTN = "gpt.transformer.h.1.attn"


@pytest.fixture(scope="module")
def docs():
    run = {mode: ampkit.audit(sm.gpt2(), sm.batch_gpt2(), sm.loss_gpt2, mode=mode, device="cpu") for mode in ("fp16", "bf16")}
    run["what_if"] = ampkit.audit(sm.gpt2(), sm.batch_gpt2(), sm.loss_gpt2, what_if=True, device="cpu")
    return run


def test_the_bf16_audit_names_the_attention_whose_error_grows_inside(docs):
    bf16 = docs["bf16"]
    (f,) = [f for f in bf16.findings if f.kind == "precision"]
    assert f.layer == ATTN and "grows inside" in f.advice and "keep gpt.transformer.h.1.attn in float32" in f.advice
    errs = {lay.name: lay for lay in bf16.layers}
    assert errs[ATTN + ".c_proj"].rel_error > 0.125 > 0.01 > errs[ATTN + ".c_attn"].rel_error
    assert f.code and "model.gpt.transformer.h[1].attn" in f.code
    # fp16's same rule does not fire: its error there is 8x smaller (3 more mantissa bits)
    assert not [f for f in docs["fp16"].findings if f.kind == "precision"]


def test_no_instrument_advises_plain_bf16(docs):
    fp16, what_if = docs["fp16"], docs["what_if"].what_if
    texts = [t for f in fp16.findings for t in (f.advice, f.code or "")]
    texts += [t for p in what_if.values() for t in (p["advice"], p["code"] or "")]
    assert not [t for t in texts if OFFERS_BF16.search(t.replace("not bf16", ""))], texts
    assert "bf16 audited too: not advised" in (fp16.note or "") or not fp16.findings
    assert what_if["bf16"]["verdict"] == "keep_in_fp32" and what_if["bf16"]["keep_in_fp32"] == [ATTN]
    assert "grows to" in what_if["bf16"]["advice"]
