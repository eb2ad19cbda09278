"""The origin is the first inf/NaN that matters (issue #50): HF T5 (a tiny config, random weights) with one
feed-forward output scaled so that fp16 overflows is named there by the fp16 audit, the what-if and the engine's
``locate_overflows()``; T5's relative-position bucketing takes ``log(0) = -inf`` in float32 too, then makes an
integer bucket of it (harmless), and is never named -- neither with the plant nor without it. The trainer
callbacks on the same models: tests/integrations/test_callback_origin_steps.py."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import ampkit  # noqa: E402
from ampkit.backends.torch.engine import MixedPrecision  # noqa: E402
from ampkit.backends.torch.numerics.origin import tracing  # noqa: E402
from origin_models import T5_WO, t5, t5_ids  # noqa: E402

PLANT = 1e5   # the feed-forward output reaches ~2.4e5: beyond fp16's 65504, finite in float32


class Seq2Seq(torch.nn.Module):
    def __init__(self, wo_scale=None):
        super().__init__()
        self.t5 = t5(wo_scale)

    def forward(self, ids):
        return self.t5(input_ids=ids, labels=ids)


def _loss(out, _y):
    return out.loss


def _audit(wo_scale, **kw):
    ids = t5_ids()
    return ampkit.audit(Seq2Seq(wo_scale), (ids, ids), loss_fn=_loss, device="cpu", **kw)


def _no_position_buckets(doc):
    """Nothing the document concludes names T5's attention (its layer rows list every module, of course)."""
    said = [doc.get("first_nonfinite"), doc.get("findings")]
    for p in (doc.get("what_if") or {}).values():
        said += [p.get(k) for k in ("first_overflow", "keep_in_fp32", "advice", "code", "float32_nonfinite")]
    assert "SelfAttention" not in json.dumps(said, default=str)


def test_fp16_audit_names_the_planted_feed_forward_not_the_position_buckets():
    rep = _audit(PLANT, mode="fp16")
    first = rep.first_nonfinite
    assert (first["name"], first["phase"], first["op"], first["in_reference"]) == (f"t5.{T5_WO}", "forward", "linear", False)
    assert first["reference_amax"] > 65504 and not rep.reference_nonfinite
    assert rep.findings[0].kind == "nonfinite" and rep.findings[0].layer == f"t5.{T5_WO}"
    assert "not a precision problem" not in rep.findings[0].advice
    _no_position_buckets(rep.to_dict())


def test_what_if_names_it_too():
    rep = _audit(PLANT, what_if=True, formats=["fp16", "bf16"])
    fp16 = rep.what_if["fp16"]
    assert fp16["first_overflow"] == f"t5.{T5_WO}" and f"t5.{T5_WO}" in fp16["keep_in_fp32"]
    assert rep.what_if["bf16"]["verdict"] == "safe"
    _no_position_buckets(rep.to_dict())


def test_the_engines_locator_names_it():
    model, ids = t5(PLANT), t5_ids()
    mp = MixedPrecision("fp16", "cpu", model=model)
    mp.locate_overflows()
    with mp.autocast():
        loss = model(input_ids=ids, labels=ids).loss
    mp.backward(loss)
    r = mp.step(torch.optim.SGD(model.parameters(), lr=0.0), zero_grad=True)
    assert r.skipped and (r.overflow["name"], r.overflow["op"], r.overflow["in_reference"]) == (T5_WO, "linear", False)
    mp.locate_overflows(enabled=False)


def test_an_unplanted_t5_has_no_finding_from_the_position_buckets():
    for kw in ({"mode": "fp16"}, {"mode": "bf16"}, {"what_if": True, "formats": ["fp16", "bf16"]}):
        rep = _audit(None, **kw)
        assert rep.first_nonfinite is None and not [f for f in rep.findings if f.kind == "nonfinite"], kw
        _no_position_buckets(rep.to_dict())
    # the op-level trace on T5's own forward sees the -inf and follows it: it reaches nothing
    model, ids = t5(), t5_ids()
    with torch.no_grad(), tracing(model) as trace:
        model(input_ids=ids, labels=ids)
    assert [(c["op"], c["in_reference"]) for c in trace.candidates][:1] == [("log", True)]
    assert "SelfAttention" in trace.candidates[0]["name"]
    assert trace.origin is None and trace.result() is None and trace.recipient is None


class Masked(torch.nn.Module):
    """An attention mask of -inf (a value made on purpose), then ``scale`` times the scores (an overflow that matters)."""

    def __init__(self, scale):
        super().__init__()
        self.scale, self.fc = scale, torch.nn.Linear(4, 4)

    def forward(self, x):
        scores = x @ x.transpose(-2, -1)
        mask = torch.ones_like(scores).triu(1).bool()
        probs = scores.masked_fill(mask, float("-inf")).softmax(-1)
        return self.fc(probs @ x * self.scale)


@pytest.mark.parametrize("scale, origin", [(1.0, None), (1e39, "mul")])
def test_the_trace_follows_the_value(scale, origin):
    model = torch.nn.Sequential(Masked(scale), torch.nn.Linear(4, 2))
    with torch.no_grad(), tracing(model) as trace:
        model(torch.ones(2, 3, 4))
    assert trace.candidates[0]["op"] == "masked_fill"         # -inf, on purpose: softmax makes it finite
    got = trace.result()
    assert (got and got["op"]) == origin
    if origin:
        assert (got["name"], got["recipient"], got["in_reference"]) == ("0", "0.fc", True)


class AddMask(torch.nn.Module):
    """Scores ``q @ q^T`` (``gain`` times the inputs' square) plus an additive mask of -inf above the diagonal."""

    def __init__(self, gain):
        super().__init__()
        torch.manual_seed(0)
        self.q, self.o, self.head = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)
        with torch.no_grad():
            self.q.weight.copy_(torch.eye(8) * gain)
            self.q.bias.zero_()

    def forward(self, x):
        q = self.q(x)
        scores = q @ q.transpose(-2, -1)
        mask = torch.full_like(scores, float("-inf")).triu(1)
        return self.head(self.o((scores + mask).softmax(-1) @ q).mean(1))


@pytest.mark.parametrize("gain, overflow", [(1.0, None), (100.0, "")])
def test_what_if_judges_an_additive_minus_inf_mask_as_what_it_is(gain, overflow):
    """The mask's -inf is computed on purpose in float32 too: no format is called unmeasurable for it, while scores
    beyond fp16's range (gain 100: ~1e5) are still predicted to overflow, at the module whose own code makes them."""
    g = torch.Generator().manual_seed(0)
    batch = torch.randn(4, 5, 8, generator=g).sign() * 3, torch.randint(0, 2, (4,), generator=g)
    rep = ampkit.audit(AddMask(gain), batch, what_if=True, formats=["fp16", "bf16"], device="cpu")
    fp16, bf16 = rep.what_if["fp16"], rep.what_if["bf16"]
    assert fp16.get("float32_nonfinite") is None and bf16["verdict"] == "safe"
    assert fp16["first_overflow"] == overflow and (fp16["verdict"] == "safe") is (overflow is None)
    assert ampkit.audit(AddMask(gain), batch, mode="bf16", device="cpu").first_nonfinite is None
