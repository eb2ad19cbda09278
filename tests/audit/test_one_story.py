"""One story per model (issues #46, #50): the audit in fp16 and bf16, the what-if, the plans proposed from
them and the report of all three documents, on four failing models (tests/story_models.py: a forward
overflow inside a module, a parameter-gradient overflow, fp32 failing too, tiny gradients), read by one
checker (:func:`contradictions`) that fails on any two of them telling different stories, and each
what-if verdict checked against a real run of that mode."""

from __future__ import annotations

import json
import re

import pytest
import torch

import ampkit
import story_models as sm
from ampkit.audit.report import AuditReport
from ampkit.cli.main import main
from ampkit.plan.propose import propose_plan
from ampkit.render.audit import page_view
from ampkit.render.audit_whatif import whatif_figure
from ampkit.render.charts import BAD

NUMERIC = ("nonfinite", "overflow", "underflow", "precision")
#: words that offer bf16 as a cure ("not bf16: ..." says why it is none)
OFFERS_BF16 = re.compile(r"train in bf16|switch to bf16|MixedPrecision\(\"bf16\"", re.IGNORECASE)
#: words that offer float32 for a module, or a loss scale, as a cure
OFFERS_FP32 = re.compile(r"keep (it|this module|the model|\S+) in float32|run it in float32|in float32 \(", re.IGNORECASE)
OFFERS_SCALE = re.compile(r"init_scale=|GradScaler\([^)]*init_scale", re.IGNORECASE)

MODELS = {"attention": (sm.attention, sm.batch_attention, None), "wide": (sm.wide, sm.batch_wide, None),
          "poisson": (sm.poisson, sm.batch_poisson, sm.loss_poisson), "tiny": (sm.tiny, sm.batch_tiny, sm.loss_tiny)}


def _audit(name, **kw) -> AuditReport:
    factory, batch, loss = MODELS[name]
    return ampkit.audit(factory(), batch(), loss, device="cpu", **kw)


def _texts(doc: dict) -> list[str]:
    """Every sentence of advice a document holds: its findings' advice and code, each what-if format's."""
    out = [t for f in doc.get("findings", []) for t in (f.get("advice") or "", f.get("code") or "")]
    out += [t for p in (doc.get("what_if") or {}).values() for t in (p.get("advice") or "", p.get("code") or "")]
    return out


def _red(view) -> dict[str, set[str]]:
    """{format: the module names whose what-if bar is drawn red} (the first bar of each module)."""
    fig = whatif_figure(view)
    out = {}
    panels = [f for f in ("fp16", "bf16", "fp8") if f in view.what_if_doc and view.what_if_doc[f].get("modules")]
    for ax, fmt in zip(fig.axes, panels):
        rows = view.what_if_doc[fmt]["modules"]
        bars = ax.patches[:len(rows)]
        out[fmt] = {r["name"] for r, b in zip(rows, bars) if b.get_facecolor()[:3] == _rgb(BAD)}
    return out


def _rgb(hex_color: str):
    from matplotlib.colors import to_rgb

    return tuple(to_rgb(hex_color))


def _numeric(doc: dict) -> list[dict]:
    return [f for f in doc["findings"] if f["kind"] in NUMERIC]


def contradictions(fp16: dict, bf16: dict, what_if: dict, plans: dict, report: str, red: dict) -> list[str]:
    """Every place two of the documents tell different stories about one model (see the module docstring)."""
    bad = []
    w16, wb = what_if["what_if"]["fp16"], what_if["what_if"]["bf16"]
    first = fp16["first_nonfinite"] or {}
    float32_fails = bool(first.get("in_reference")) or wb.get("float32_nonfinite") is not None
    # bf16 is offered as a cure only where bf16's own audit and prediction are healthy
    bf16_bad = bool(_numeric(bf16) or bf16["first_nonfinite"]) or wb["verdict"] in ("keep_in_fp32", "unsafe")
    if bf16_bad or float32_fails:
        for doc, who in ((fp16, "audit fp16"), (what_if, "what-if")):
            offers = [t for t in _texts(doc) if OFFERS_BF16.search(t.replace("not bf16", ""))]
            bad += [f"{who} offers bf16 though bf16 is no cure here: {t[:160]}" for t in offers]
    # what the what-if predicts for bf16 holds in the real bf16 audit
    if wb["verdict"] == "safe" and _numeric(bf16):
        bad.append(f"what-if bf16 safe, the bf16 audit finds {[(f['kind'], f['layer']) for f in _numeric(bf16)]}")
    if wb["verdict"] == "keep_in_fp32" and not _numeric(bf16):
        bad.append(f"what-if bf16 keeps {wb['keep_in_fp32']} in float32, the bf16 audit finds nothing")
    if float32_fails:  # no instrument gives precision advice, every one names the same origin
        for doc, who in ((fp16, "audit fp16"), (bf16, "audit bf16"), (what_if, "what-if")):
            bad += [f"{who} gives precision advice to a model float32 fails on: {t[:160]}" for t in _texts(doc)
                    if OFFERS_FP32.search(t) or OFFERS_SCALE.search(t) or OFFERS_BF16.search(t)]
        origins = {first.get("name"), (bf16["first_nonfinite"] or {}).get("name"), wb.get("float32_nonfinite")}
        if len(origins) != 1 or None in origins:
            bad.append(f"the instruments name different origins of float32's inf/NaN: {origins}")
        if {p["verdict"] for p in what_if["what_if"].values()} != {"not_measured"}:
            bad.append("the what-if judges a format on a model float32 fails on")
        bad += [f"the plan from {k} keeps modules of a model no precision fixes: {p.modules}" for k, p in plans.items()
                if p.modules]
    elif first.get("phase") == "forward":  # a forward overflow: float32 for its module, never a loss scale
        name = first["name"]
        if fp16["suggested_loss_scale"] is not None and not any(
                f["kind"] == "underflow" and "init_scale=" in f["advice"] for f in fp16["findings"]):
            bad.append(f"a forward overflow gets a loss scale: suggested_loss_scale {fp16['suggested_loss_scale']}")
        if "A loss scale that fits" in report:
            bad.append("the report offers a loss scale for a forward overflow")
        bad += [f"a forward finding's cure is a loss scale: {f['advice'][:160]}" for f in fp16["findings"]
                if f["kind"] in ("nonfinite", "overflow") and OFFERS_SCALE.search((f.get("code") or "") + f["advice"])]
        if w16["first_overflow"] != name or name not in w16["keep_in_fp32"]:
            bad.append(f"the audit's forward origin {name} is not the what-if's ({w16['first_overflow']}, keep "
                       f"{w16['keep_in_fp32']})")
        if name not in plans["audit fp16"].modules:
            bad.append(f"the plan from the fp16 audit does not keep {name} in float32: {plans['audit fp16'].modules}")
    # the what-if's fp16 verdict and range, and the audit's loss scale, are one story
    rng = w16["loss_scale_range"]
    if w16["verdict"] in ("safe", "safe_with_scale") and not rng:
        bad.append(f"what-if fp16 {w16['verdict']} without a loss-scale range")
    if rng and w16["verdict"] == "safe" and not rng[0] <= w16["default_loss_scale"] <= rng[1]:
        bad.append(f"what-if fp16 safe with a range {rng} that leaves out the default {w16['default_loss_scale']}")
    if rng and w16["verdict"] == "safe" and (w16["grad_lost_frac"] or 0) > 0.01:
        bad.append(f"what-if fp16 safe though {w16['grad_lost_frac']:.0%} is lost at the default scale")
    if rng and fp16["suggested_loss_scale"] and w16["verdict"] in ("safe", "safe_with_scale") and not (
            rng[0] <= fp16["suggested_loss_scale"] <= rng[1]):
        bad.append(f"the audit suggests {fp16['suggested_loss_scale']:g}, outside the what-if's range {rng}")
    if fp16["skipped_steps"] and w16["verdict"] == "safe_with_scale" and fp16["loss_scale"] != rng[1]:
        bad.append(f"the audit backs off to {fp16['loss_scale']:g}, the what-if's range ends at {rng[1]:g}")
    if fp16["skipped_steps"] and re.search(r"forward", " ".join(_texts(fp16))):
        bad.append("a gradient overflow is called a forward one")
    # the report's loss-scale sentence is the audit's number
    said = re.findall(r"A loss scale that fits: ([0-9][0-9.e+-]*[0-9])", report)
    if said and (fp16["suggested_loss_scale"] is None or abs(float(said[0]) / fp16["suggested_loss_scale"] - 1) > 1e-5):
        bad.append(f"the report's loss scale {said} is not the audit's {fp16['suggested_loss_scale']}")
    # a chart colours exactly what the verdict names
    for fmt, names in red.items():
        keep = set(what_if["what_if"][fmt].get("keep_in_fp32") or [])
        if names != keep:
            bad.append(f"the what-if chart draws {sorted(names)} red for {fmt}, the verdict names {sorted(keep)}")
    return bad


@pytest.fixture(scope="module", params=list(MODELS))
def story(request, tmp_path_factory):
    name = request.param
    fp16, bf16 = _audit(name, mode="fp16"), _audit(name, mode="bf16")
    what_if = _audit(name, what_if=True, steps=1)
    docs = {k: json.loads(json.dumps(r.to_dict())) for k, r in (("fp16", fp16), ("bf16", bf16), ("what_if", what_if))}
    plans = {"audit fp16": propose_plan(docs["fp16"]), "audit bf16": propose_plan(docs["bf16"]),
             "what-if": propose_plan(docs["what_if"])}
    tmp = tmp_path_factory.mktemp(name)
    paths = []
    for k, doc in docs.items():
        paths.append(tmp / f"{k}.json")
        paths[-1].write_text(json.dumps(doc))
    assert main(["report", *map(str, paths), "--html", str(tmp / "r.html"), "--markdown", str(tmp / "r.md")]) == 0
    report = (tmp / "r.html").read_text() + (tmp / "r.md").read_text()
    red = _red(page_view(AuditReport.from_dict(docs["what_if"])))
    return name, docs, plans, report, red


def test_the_documents_of_every_command_tell_one_story(story):
    name, docs, plans, report, red = story
    bad = contradictions(docs["fp16"], docs["bf16"], docs["what_if"], plans, report, red)
    assert bad == [], f"{name}: " + "\n".join(bad)


def test_each_what_if_verdict_holds_in_a_real_run(story):
    name, docs, _plans, _report, _red_bars = story
    w16, wb = docs["what_if"]["what_if"]["fp16"], docs["what_if"]["what_if"]["bf16"]
    if w16["verdict"] == "not_measured":  # float32 fails: the real runs fail in float32 too, at the same origin
        for mode in ("fp16", "bf16"):
            first = docs[mode]["first_nonfinite"]
            assert first["in_reference"] and first["name"] == w16["float32_nonfinite"], (mode, first)
        return
    if w16["verdict"] == "safe":
        real = docs["fp16"]
        assert not _numeric(real) and real["skipped_steps"] == 0, real["findings"]
    elif w16["verdict"] == "safe_with_scale":
        lo, hi = w16["loss_scale_range"]
        pick = lo if w16["default_loss_scale"] < lo else hi
        at = _audit(name, mode="fp16", loss_scale=pick)  # the scale the what-if advises: a clean step there
        assert not [f for f in at.findings if f.kind in NUMERIC] and at.first_nonfinite is None, at.findings
        real = docs["fp16"]  # and at the default, what the what-if says goes wrong there does
        if w16["default_loss_scale"] > hi:
            assert real["skipped_steps"] and real["loss_scale"] == hi
        else:
            assert any(f["kind"] == "underflow" for f in real["findings"])
    else:  # keep_in_fp32 / unsafe: the real fp16 run fails where the what-if says
        first = docs["fp16"]["first_nonfinite"]
        named = set(w16["keep_in_fp32"])
        assert first is not None and first["name"] in named, (first, named)
    if wb["verdict"] == "safe":
        assert not _numeric(docs["bf16"]) and docs["bf16"]["first_nonfinite"] is None, docs["bf16"]["findings"]
    else:
        assert {f["layer"] for f in _numeric(docs["bf16"])} & set(wb["keep_in_fp32"]), (wb, docs["bf16"]["findings"])


def test_the_checker_finds_each_kind_of_contradiction(story):
    """A test that cannot fail is a defect: each rule of the checker fires on a document made to contradict."""
    name, docs, plans, report, red = story
    fp16, bf16, what_if = (json.loads(json.dumps(docs[k])) for k in ("fp16", "bf16", "what_if"))
    if name == "attention":
        fp16["suggested_loss_scale"] = 65536.0
        assert any("loss scale" in b for b in contradictions(fp16, bf16, what_if, plans, report + "A loss scale that fits: "
                                                             "65536", red))
    bf16["findings"].append({"layer": "x", "kind": "precision", "advice": "keep x in float32", "code": None})
    what_if["what_if"]["fp16"]["advice"] = "fp16 needs x kept in float32 -- or train in bf16, which has float32's range"
    found = contradictions(fp16, bf16, what_if, plans, report, red)
    assert any("offers bf16" in b for b in found) or any("precision advice" in b for b in found), found
    red = {k: v | {"not-kept"} for k, v in red.items()}
    assert any("chart" in b for b in contradictions(docs["fp16"], docs["bf16"], docs["what_if"], plans, report, red))


def test_the_back_off_follows_gradscaler_below_1():
    """A ResNet-like model whose loss is x1e6: a real GradScaler skips 18 steps and trains at 0.25; the audit
    says the same, from two measured steps (the others predicted: the scales are powers of 2)."""
    model, batch = sm.resnet(), sm.batch_resnet()
    skips, scale = sm.gradscaler_start(model, batch, sm.loss_resnet)
    assert (skips, scale) == (18, 0.25)  # what this CPU measures; the audit must agree with it
    from ampkit.audit import driver

    measured = []
    real = driver.back_off

    def counting(session, step, s, outcome, max_finite, say=lambda s, o: None):
        return real(session, step, s, outcome, max_finite, lambda s, o: (measured.append(s), say(s, o)))

    driver.back_off = counting
    try:
        rep = ampkit.audit(sm.resnet(), batch, sm.loss_resnet, mode="fp16", device="cpu")
    finally:
        driver.back_off = real
    assert (rep.skipped_steps, rep.loss_scale, rep.suggested_loss_scale) == (skips, scale, scale)
    assert rep.first_nonfinite is None and all(lay.fwd_nonfinite == 0 for lay in rep.layers)
    assert len(measured) <= 3 and measured[-1] == scale, measured
    assert "trains at 0.25" in rep.note and "forward" not in rep.note


def test_the_engines_alarm_never_calls_a_finite_forward_an_overflow():
    """ampkit's engine on the same model and loss: the alarm fires before a step is taken, and says the
    loss is finite (the gradients alone overflow), not 'inf/NaN in the forward pass'."""
    model, (x, y) = sm.resnet(), sm.batch_resnet()
    mp = ampkit.MixedPrecision("fp16", device="cpu", min_scale_warning=1.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    with pytest.warns(ampkit.LossScaleWarning) as caught:
        for _ in range(18):
            with mp.autocast():
                loss = sm.loss_resnet(model(x), y)
            mp.backward(loss)
            mp.step(opt, zero_grad=True)
    msg = str(caught[0].message)
    assert "the loss is finite" in msg and "forward pass" not in msg, msg
    assert "Switch to bf16" not in msg and "--mode bf16 --device cpu` shows it healthy" in msg  # bf16 not claimed


def test_cli_a_model_float32_fails_on_is_a_finding_with_exit_1(tmp_path, capsys):
    """``ampkit audit`` on a model whose own exp overflows float32: exit 1 with the document (no 'math domain
    error'), the origin the root module, named; the what-if names the same origin and judges nothing."""
    out = tmp_path / "a.json"
    assert main(["audit", "--model", "story_models:poisson_workload", "--mode", "fp16", "--device", "cpu",
                 "--json", str(out)]) == 1
    doc = json.loads(out.read_text())
    first = doc["first_nonfinite"]
    assert (first["name"], first["op"], first["in_reference"], first["phase"]) == ("(model)", "exp", True, "forward")
    assert "not a precision problem" in doc["findings"][0]["advice"] and doc["suggested_loss_scale"] is None
    assert main(["audit", "--what-if", "--model", "story_models:poisson_workload", "--device", "cpu", "--steps", "1",
                 "--json", str(out)]) == 0
    w = json.loads(out.read_text())["what_if"]
    assert {(p["verdict"], p["float32_nonfinite"]) for p in w.values()} == {("not_measured", "(model)")}
    assert {p.get("float32_nonfinite_op") for p in w.values()} <= {"exp", None}  # the op, where its summary holds it
    assert "math domain" not in capsys.readouterr().err
