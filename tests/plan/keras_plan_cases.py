"""Child process of test_plan_keras.py: the plan cases in ONE TensorFlow start per Keras.
``python keras_plan_cases.py keras|tf_keras PLAN_DIR``; one JSON line per case, ``{"case": ...}``."""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ["CUDA_VISIBLE_DEVICES"] = ""
FLAVOR = sys.argv[1]
if FLAVOR == "tf_keras":
    os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np  # noqa: E402


def out(case: str, **kw) -> None:
    print(json.dumps({"case": case, **kw}, default=str), flush=True)


def main() -> None:
    import tensorflow as tf

    if FLAVOR == "tf_keras":
        import tf_keras as k
    else:
        import keras as k
    import plan_keras_models as kp

    import ampkit.keras as ak
    from ampkit.errors import UsageError

    plan_dir = sys.argv[2]
    x, y = kp.attention_data()

    def fp16_run(mp):
        with mp.scope():
            model = kp.attention_model(k, tf)
        model = mp.prepare(model)
        model.compile(optimizer=mp.optimizer(k.optimizers.SGD(0.01)),
                      loss=k.losses.SparseCategoricalCrossentropy(from_logits=True))
        hist = model.fit(x, y, epochs=4, batch_size=64, verbose=0, callbacks=[mp.callback()])
        compute = {lay.name: lay.compute_dtype for lay in model._flatten_layers(include_self=False)
                   if type(lay).__name__ == "Dense"}
        return {"losses": hist.history["loss"], "skipped": mp.stats["skipped"], "compute": compute,
                "plan_findings": [f for f in mp.verify(model) if f.get("check") == "plan"],
                "plan": mp.plan.to_dict()["modules"]}

    out("fp16_none", **fp16_run(ak.MixedPrecision("fp16", keras=FLAVOR)))
    out("fp16_keep", **fp16_run(ak.MixedPrecision("fp16", keras=FLAVOR, keep_fp32=["attn"])))
    path = os.path.join(plan_dir, "plan.json")
    with open(path, "w") as fh:
        json.dump({"kind": "ampkit-plan", "version": 1, "framework": "tensorflow", "default": "fp16",
                   "modules": {"ScoresAttention": "fp32"}}, fh)
    out("fp16_file", **fp16_run(ak.MixedPrecision.from_plan(path, keras=FLAVOR)))

    # bf16: the cancelling layer's own error back to float32's level, bf16 elsewhere
    rng = np.random.default_rng(0)
    xc = rng.standard_normal((64, 16)).astype("float32")
    ref = kp.cancel_model(k, tf)
    r = k.Model(ref.input, ref.get_layer("cancel").output)(xc).numpy()
    errs = {}
    for label, keep in (("none", None), ("keep", ["cancel"])):
        mp = ak.MixedPrecision("bf16", keras=FLAVOR, keep_fp32=keep)
        with mp.scope():
            m = kp.cancel_model(k, tf)
        m = mp.prepare(m)
        c, b = k.Model(m.input, [m.get_layer("cancel").output, m.get_layer("body").output])(xc)
        errs[label] = {"err": float(np.linalg.norm(np.asarray(c, "float32") - r) / np.linalg.norm(r)),
                       "cancel": str(c.dtype.name), "body": str(b.dtype.name)}
    out("bf16", **errs)

    # fp8: the outlier layer kept out of Keras float8, the rest converted (Keras 3 only)
    try:
        mp = ak.MixedPrecision.from_plan({"kind": "ampkit-plan", "version": 1, "framework": "tensorflow",
                                          "default": "fp8", "modules": {"mid": "bf16"}}, keras=FLAVOR)
        with mp.scope():
            m = kp.outlier_model(k, tf)
        m = mp.prepare(m)
        out("fp8", layers={d["name"]: [d["converted"], d["reason"]] for d in mp.fp8_layers})
    except Exception as exc:
        out("fp8", error=f"{type(exc).__name__}: {exc}")

    # bad plans: one line naming the entry
    bad = {}
    for label, doc in (("nothing", {"modules": {"nope*": "fp32"}}), ("mode", {"modules": {"attn": "fp7"}}),
                       ("torch", {"framework": "torch"})):
        try:
            mp = ak.MixedPrecision.from_plan({"kind": "ampkit-plan", "version": 1, "framework": "tensorflow",
                                              "default": "fp16", **doc}, keras=FLAVOR)
            with mp.scope():
                mp.prepare(kp.attention_model(k, tf))
            bad[label] = None
        except UsageError as exc:
            bad[label] = str(exc)
    out("bad", **bad)


if __name__ == "__main__":
    main()
