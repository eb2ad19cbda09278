"""``ampkit audit --what-if`` (PyTorch): predictions from float32 alone, checked against real audits of
the same planted models and batches (whatif_models.py), the summaries against independent counts,
the CLI and the document."""

from __future__ import annotations

import json
import math

import ml_dtypes
import numpy as np
import pytest
import torch
import whatif_models as wm

import ampkit
from ampkit.audit.report import AuditReport
from ampkit.audit.whatif import EMIN, FP8_LOST, FP8_MIN_SNR_DB, NBINS
from ampkit.backends.torch.numerics.summary import summarize
from ampkit.cli.main import main
from ampkit.envelope import DocumentError
from ampkit.errors import UsageError


def whatif(model, batch, loss_fn=None, **kw):
    return ampkit.audit(model, batch, loss_fn, what_if=True, device="cpu", steps=1, **kw)


def test_first_overflow_predicted_is_the_real_fp16_audits_first_nonfinite():
    b = wm.batch()
    pred = whatif(wm.overflow(), b).what_if
    real = ampkit.audit(wm.overflow(), b, mode="fp16", device="cpu")
    assert real.first_nonfinite["name"] == "2" and real.first_nonfinite["phase"] == "forward"
    assert pred["fp16"]["first_overflow"] == real.first_nonfinite["name"]
    assert pred["fp16"]["first_overflow_phase"] == "forward"
    assert pred["fp16"]["verdict"] in ("keep_in_fp32", "unsafe") and "2" in pred["fp16"]["keep_in_fp32"]
    row = next(r for r in pred["fp16"]["modules"] if r["name"] == "2")
    assert "overflow" in row["reasons"]
    # the share predicted to overflow is the share the fp16 pass really turned into inf
    model, seen = wm.overflow(), {}
    model[2].register_forward_hook(lambda m, args, out: seen.setdefault("y", out.detach()))
    model(b[0])
    nonzero = int((seen["y"] != 0).sum())
    lay = next(lay for lay in real.layers if lay.name == "2")
    assert row["overflow_frac"] > 0.1 and abs(row["overflow_frac"] - lay.fwd_nonfinite / nonzero) <= 0.05
    # bf16 has float32's range: predicted safe, and the real bf16 audit finds no inf
    assert pred["bf16"]["verdict"] == "safe" and pred["bf16"]["first_overflow"] is None
    assert ampkit.audit(wm.overflow(), b, mode="bf16", device="cpu").first_nonfinite is None


@pytest.mark.parametrize("scale", [2.0**16, 2.0**20])
def test_gradient_underflow_shares_match_the_real_audit_at_the_scale(scale):
    b = wm.batch()
    pred = whatif(wm.clean(), b, wm.tiny_loss, loss_scale=scale).what_if["fp16"]
    real = ampkit.audit(wm.clean(), b, wm.tiny_loss, mode="fp16", loss_scale=scale, device="cpu")
    measured = {lay.name: lay for lay in real.layers}
    for row in pred["modules"]:
        lay = measured[row["name"]]
        assert abs(row["grad_underflow_frac"] - lay.grad_underflow_frac) <= 0.05, (row, lay)
        assert abs(row["grad_lost_frac"] - lay.grad_lost_frac) <= 0.05, (row, lay)
    assert pred["loss_scale"] == scale


def test_underflow_at_the_default_scale_and_not_at_the_predicted_range():
    b = wm.batch()
    pred = whatif(wm.clean(), b, wm.tiny_loss).what_if["fp16"]
    lo, hi = pred["loss_scale_range"]
    assert pred["verdict"] == "safe_with_scale" and 2.0**16 < lo <= hi
    assert pred["grad_lost_by_scale"][str(2**16)] > 0.01 >= pred["grad_lost_by_scale"][str(int(lo))]
    assert f"init_scale={lo:g}" in pred["code"]
    # reality: the fp16 audit at GradScaler's default finds underflow, at the predicted lo it does not
    at_default = ampkit.audit(wm.clean(), b, wm.tiny_loss, mode="fp16", loss_scale=2.0**16, device="cpu")
    at_lo = ampkit.audit(wm.clean(), b, wm.tiny_loss, mode="fp16", loss_scale=lo, device="cpu")
    assert any(f.kind == "underflow" for f in at_default.findings)
    assert not any(f.kind in ("underflow", "overflow", "nonfinite") for f in at_lo.findings)


def test_clean_model_safe_and_the_real_fp16_audit_finds_nothing():
    b = wm.batch()
    pred = whatif(wm.clean(), b).what_if
    assert pred["fp16"]["verdict"] == "safe" and pred["bf16"]["verdict"] == "safe"
    assert pred["fp8"]["verdict"] == "safe" and pred["fp8"]["eligible"] == 2
    lo, hi = pred["fp16"]["loss_scale_range"]
    assert lo <= 2.0**16 <= hi and pred["fp16"]["first_overflow"] is None
    real = ampkit.audit(wm.clean(), b, mode="fp16", device="cpu")
    assert real.first_nonfinite is None and real.findings == []


def _e4m3_lost_and_snr(x: np.ndarray, amax) -> tuple[float, float]:
    """Independently of ampkit: scale to 448/amax, round trip through ml_dtypes' float8_e4m3fn."""
    y = x * (448.0 / amax)
    q = np.clip(y, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32) / (448.0 / amax)
    nz = x != 0
    lost = float((nz & (np.abs(y) < 2.0**-6)).sum() / nz.sum())
    return lost, float(10 * np.log10((x**2).sum() / ((q - x) ** 2).sum()))


def test_outlier_channel_ruins_tensorwise_fp8_and_only_per_channel_fixes_it():
    b = wm.batch()
    pred = whatif(wm.outlier(), b).what_if["fp8"]
    assert pred["verdict"] != "safe" and pred["keep_in_fp32"] == ["3"]
    row = next(r for r in pred["modules"] if r["name"] == "3")
    assert row["reasons"] == ["input"] and row["input_e4m3"]["tensorwise"]["lost_frac"] > FP8_LOST
    # an outlier input channel sits in every row: rowwise scaling does not help; per-channel does
    assert row["fixed_by"] == ["channelwise"], row
    assert row["input_e4m3"]["rowwise"]["lost_frac"] > FP8_LOST
    # advice names only the scaling the prediction shows fixing it
    assert "channelwise" in pred["advice"] and "rowwise" not in pred["advice"] and "block32" not in pred["advice"]
    assert "fqn not in {'3'}" in pred["code"]
    # reality: the real input of "3" quantized independently (ml_dtypes) agrees with the prediction
    model, seen = wm.outlier(), {}
    model[3].register_forward_pre_hook(lambda m, args: seen.update(x=args[0].detach().numpy().copy()))
    with torch.no_grad():
        model(b[0])
    x = seen["x"]
    lost_t, _ = _e4m3_lost_and_snr(x, np.abs(x).max())
    lost_c, snr_c = _e4m3_lost_and_snr(x, np.abs(x).max(axis=0, keepdims=True).clip(1e-30))
    assert lost_t > FP8_LOST and lost_c <= FP8_LOST and snr_c >= FP8_MIN_SNR_DB["e4m3"]
    assert lost_t == pytest.approx(row["input_e4m3"]["tensorwise"]["lost_frac"], abs=0.01)
    # the other formats are not hurt by it
    assert whatif(wm.outlier(), b).what_if["bf16"]["verdict"] == "safe"


def test_summary_counts_are_exact_against_numpy_and_ml_dtypes():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(300, 40, generator=g) * torch.logspace(-12, 3, 40)  # magnitudes over 50 binades
    x[0, :5] = 0.0
    s = summarize(x)
    a = x.abs().numpy().astype(np.float64)
    nz = a[a > 0]
    expect = np.bincount(np.floor(np.log2(nz)).astype(int) - EMIN, minlength=NBINS)
    assert s.hist == expect.tolist() and s.nonzero == nz.size and s.count == x.numel()
    assert s.amax == a.max()
    for k in (0, 16, 20):  # a power-of-two loss scale: the share below fp16's smallest normal is exact
        assert s.below(2.0**-14, 2.0**k) == int((nz * 2.0**k < 2.0**-14).sum())
    n, s1, s2, e2 = s.rounding["bf16"]
    ref = x.numpy().ravel()
    bf = ref.astype(ml_dtypes.bfloat16).astype(np.float64)
    assert n == ref.size and e2 == pytest.approx(((bf - ref) ** 2).sum(), rel=1e-9)
    assert s.noise("fp16")[0] < 2.0**-11 < s.noise("bf16")[0] < 2.0**-8
    # beyond HIST_SAMPLE elements the histogram is a systematic sample scaled up: shares within 0.005
    big = torch.randn(1000, 700, generator=g) * torch.logspace(-9, 2, 700)
    s = summarize(big)
    nz = big.abs().double()
    assert s.amax == nz.max().item() and s.count == big.numel()
    for k in (0, 12, 24):
        assert abs(s.share_below(2.0**-14, 2.0**k) - float((nz * 2.0**k < 2.0**-14).double().mean())) < 0.005


def test_bf16_flags_a_module_whose_spread_is_below_its_rounding():
    class Offset(torch.nn.Module):
        def forward(self, x):
            return x * 1e-3 + 1000.0  # 1000 +- 0.001: bf16's spacing at 1000 is 4

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), Offset(), torch.nn.Linear(8, 4))
    pred = whatif(model, wm.batch()).what_if["bf16"]
    assert pred["verdict"] == "keep_in_fp32" and pred["keep_in_fp32"] == ["1"]
    row = next(r for r in pred["modules"] if r["name"] == "1")
    # tiny against its norm; against its spread as large as the spread itself (all of it rounds to 1000)
    assert row["noise_to_spread"] > 0.5 and row["rel_error"] < 1e-5


def test_document_round_trip_and_malformed_what_if():
    rep = whatif(wm.clean(), wm.batch(), formats="fp16,fp8")
    doc = json.loads(json.dumps(rep.to_dict()))
    assert set(doc["what_if"]) == {"fp16", "fp8"} and doc["mode"] == "fp32"
    for p in doc["what_if"].values():
        assert {"verdict", "first_overflow", "loss_scale_range", "modules"} <= set(p)
    back = AuditReport.from_dict(doc)
    assert back.what_if == doc["what_if"]
    doc["what_if"] = {"fp16": {"no": "verdict"}}
    with pytest.raises(DocumentError, match="what_if"):
        AuditReport.from_dict(doc)


def test_bad_arguments_are_one_line():
    with pytest.raises(UsageError, match="--formats takes fp16, bf16 and fp8; received 'fp4'"):
        whatif(wm.clean(), wm.batch(), formats="fp16,fp4")
    with pytest.raises(UsageError, match="at least one"):
        whatif(wm.clean(), wm.batch(), formats=[])


def test_cli_writes_the_what_if_document(tmp_path, capsys):
    out = tmp_path / "w.json"
    rc = main(["audit", "--what-if", "--model", "whatif_models:overflow", "--input-shape", "16", "--num-classes", "4",
               "--device", "cpu", "--steps", "1", "--json", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert list(doc["what_if"]) == ["fp16", "bf16", "fp8"] and doc["what_if"]["fp16"]["first_overflow"] == "2"
    text = capsys.readouterr().out
    assert "keep_in_fp32" in text or "unsafe" in text
    for flags, needle in ((["--what-if", "--mode", "fp16"], "--mode does not apply"),
                          (["--formats", "fp16"], "--formats applies to --what-if only"),
                          (["--what-if", "--formats", "int4"], "--formats takes")):
        assert main(["audit", *flags, "--model", "whatif_models:clean", "--input-shape", "16"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err


def test_a_backend_without_observe_says_so():
    import toy_backend as toy

    from ampkit.audit.config import AuditConfig
    from ampkit.audit.driver import audit_here

    with pytest.raises(UsageError, match="--what-if is not available for --framework toy"):
        audit_here(AuditConfig(what_if=True), toy.ToyBackend())
    assert math.isfinite(0.0)


def test_report_renders_the_what_if_table_and_chart(tmp_path):
    doc = tmp_path / "w.json"
    doc.write_text(json.dumps(whatif(wm.outlier(), wm.batch()).to_dict()))
    html, md = tmp_path / "r.html", tmp_path / "r.md"
    assert main(["report", str(doc), "--html", str(html), "--markdown", str(md), "--plots", str(tmp_path / "p")]) == 0
    page = html.read_text()
    assert 'class="audit-whatif"' in page and "<svg" in page and "keep out of the format" in page
    assert '<span class="v v-keep_in_fp32">keep_in_fp32</span>' in page  # fp8, the outlier model
    text = md.read_text()
    assert "| fp8 | keep_in_fp32 | — | — | 3 |" in text and "| fp16 | safe" in text
    assert (tmp_path / "p" / "a-audit-1.png").stat().st_size > 10_000
