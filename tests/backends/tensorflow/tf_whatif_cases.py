"""Bodies of test_tf_whatif.py, each run in a fresh interpreter: ``ampkit audit --what-if`` on planted
Keras models (Keras 3 or tf_keras), every prediction checked against a real audit of the same model
and batch in the same process."""

from __future__ import annotations

import importlib

import numpy as np


def _models(flavor: str):
    k = importlib.import_module(flavor)

    def mlp(boom=None, width=32):
        def build():
            inp = k.Input((16,))
            h = k.layers.Dense(width, activation="relu", name="hidden")(inp)
            if boom:
                h = k.layers.Rescaling(boom, name="boom")(h)
            out = k.layers.Dense(4, name="head")(h)
            return k.Model(inp, out)
        return build

    def outlier():
        model = mlp(width=64)()
        kernel, bias = model.get_layer("hidden").get_weights()
        kernel[:, 3] *= 1e4  # channel 3 of head's input: 10**4 times the others
        model.get_layer("hidden").set_weights([kernel, bias])
        return model

    ce = k.losses.SparseCategoricalCrossentropy(from_logits=True)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 16)).astype("float32")
    y = rng.integers(0, 4, 32)
    return {"overflow": mlp(boom=1e5), "clean": mlp(), "outlier": outlier}, x, y, ce, (lambda t, p: ce(t, p) * 1e-8)


def planted(flavor: str) -> None:
    import ampkit

    models, x, y, ce, tiny = _models(flavor)

    def whatif(build, loss=ce, **kw):
        return ampkit.audit(build, (x, y), loss, framework="tensorflow", what_if=True, **kw).what_if

    # 1. forward overflow: the predicted first overflow is the real fp16 audit's first inf
    pred = whatif(models["overflow"])
    real = ampkit.audit(models["overflow"], (x, y), ce, framework="tensorflow", mode="fp16")
    assert real.first_nonfinite["name"] == "boom" == pred["fp16"]["first_overflow"], (real.first_nonfinite, pred["fp16"])
    assert "boom" in pred["fp16"]["keep_in_fp32"] and pred["bf16"]["verdict"] == "safe"
    # 2. gradient underflow shares within 0.05 of the real audit at LossScaleOptimizer's initial scale; the
    # predicted range starts above it, and the real audit at the range's start finds no underflow
    p16 = whatif(models["clean"], tiny, loss_scale=2.0**15)["fp16"]
    at_default = ampkit.audit(models["clean"], (x, y), tiny, framework="tensorflow", mode="fp16", loss_scale=2.0**15)
    measured = {lay.name: lay for lay in at_default.layers}
    for row in p16["modules"]:
        assert abs(row["grad_underflow_frac"] - measured[row["name"]].grad_underflow_frac) <= 0.05, row
        assert abs(row["grad_lost_frac"] - measured[row["name"]].grad_lost_frac) <= 0.05, row
    assert any(f.kind == "underflow" for f in at_default.findings)
    if flavor == "tf_keras":  # its losses compute in float16 on a float16 output: no scale above 65504 fits
        assert p16["verdict"] == "unsafe" and p16["loss_scale_range"] is None and p16["scaled_loss_limit"], p16
        above = ampkit.audit(models["clean"], (x, y), tiny, framework="tensorflow", mode="fp16", loss_scale=2.0**16)
        assert above.first_nonfinite is not None, "predicted: a scale above 65504 overflows tf_keras's float16 loss"
        lo = None
    else:
        lo = p16["loss_scale_range"][0]
        assert p16["verdict"] == "safe_with_scale" and lo > 2.0**15 and f"initial_scale={lo:g}" in p16["code"], p16
    at_lo = lo and ampkit.audit(models["clean"], (x, y), tiny, framework="tensorflow", mode="fp16", loss_scale=lo)
    if at_lo:
        assert not any(f.kind in ("underflow", "overflow", "nonfinite") for f in at_lo.findings), at_lo.findings
    # 3. the clean model: safe for fp16 and bf16, and the real fp16 audit finds nothing
    pred = whatif(models["clean"])
    assert pred["fp16"]["verdict"] == "safe" and pred["bf16"]["verdict"] == "safe", pred
    real = ampkit.audit(models["clean"], (x, y), ce, framework="tensorflow", mode="fp16")
    # nothing numerical; the float16 output layer ("head", Dense under mixed_float16) is the one contract finding
    assert real.first_nonfinite is None and [(f.kind, f.layer) for f in real.findings] == [("contract", "head")], \
        real.findings
    # 4. the outlier channel: tensorwise fp8 fails "head"; per-channel scaling fixes it, rowwise does not
    p8 = whatif(models["outlier"])["fp8"]
    assert p8["verdict"] != "safe" and p8["keep_in_fp32"] == ["head"], p8
    row = next(r for r in p8["modules"] if r["name"] == "head")
    assert "channelwise" in row["fixed_by"] and "rowwise" not in row["fixed_by"], row
    for scaling in ("rowwise", "block32"):
        assert (scaling in p8["advice"]) == (scaling in row["fixed_by"]), (scaling, p8["advice"])
    print(f"{flavor} what-if planted cases: ok; fp8 code: {p8['code']}")
