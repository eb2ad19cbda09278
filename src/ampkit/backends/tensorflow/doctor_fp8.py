"""The doctor's fp8 self-test for Keras: a real fp8 step through ``ampkit.keras.MixedPrecision("fp8")``
(Keras float8 layers, :mod:`.engine.fp8`), checked against the same step in bf16."""

from __future__ import annotations

__all__ = ["selftest"]


def selftest() -> tuple[str, str]:
    """One fp8 step of a small Keras model through ``MixedPrecision("fp8")``, checked against the same
    step in bf16: the middle Dense quantized, its weights updated, its scales moved, losses close."""
    import numpy as np

    from ...doctor.ops import fp8_loss_gap
    from ...errors import one_line
    from .engine.mixed_precision import MixedPrecision

    try:
        import keras

        from .tfimport import import_tensorflow

        tf = import_tensorflow()
        x = np.random.default_rng(0).normal(size=(32, 32)).astype("float32")
        y = np.arange(32) % 16
        losses, detail = {}, ""
        for mode in ("bf16", "fp8"):
            mp = MixedPrecision(mode, keras="keras")
            keras.utils.set_random_seed(0)
            with mp.scope():
                inp = keras.Input((32,))
                h = keras.layers.Dense(64, activation="gelu", name="first")(inp)
                h = keras.layers.Dense(64, activation="gelu", name="middle")(h)
                model = keras.Model(inp, keras.layers.Dense(16, dtype="float32", name="logits")(h))
                if mode == "fp8":
                    model = mp.prepare(model)
                w0 = model.get_layer("middle").kernel.numpy().copy()
                opt = keras.optimizers.SGD(0.1)
                loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
                # traced: Keras's float8 custom gradient fails under an eager GradientTape in TF (fit traces too)
                loss = tf.function(lambda: mp.train_step(model, opt, x, y, loss_fn))()  # noqa: B023 (called at once)
            losses[mode] = float(loss)
            if mode == "fp8":
                mid = model.get_layer("middle")
                converted = [d["name"] for d in mp.fp8_layers if d["converted"]]
                if converted != ["middle"] or mid.quantization_mode != "float8":
                    return "fail", f"the engine converted {converted or 'no layer'}, expected the middle Dense"
                if np.array_equal(w0, mid.kernel.numpy()):
                    return "fail", "the fp8 step did not change the quantized layer's weights"
                if float(mid.inputs_amax_history.numpy().max()) <= 0:
                    return "fail", "the float8 layer's amax history did not record the step's inputs"
                detail = "emulated: quantize-dequantize, no fp8 speed here" if mp.emulated else "fp8 hardware"
        l8 = losses["fp8"]
        gap, why = fp8_loss_gap(l8, losses["bf16"])
        if why:
            return "fail", why
        return "pass", (f"one fp8 step through ampkit.keras ({detail}): middle Dense as Keras float8, loss {l8:.4g} "
                        f"within {gap:.2%} of bf16's, weights updated, amax history recorded")
    except Exception as exc:  # a self-test reports, it never crashes the doctor
        return "fail", f"fp8 step through ampkit.keras failed: {one_line(exc, 300)}"
