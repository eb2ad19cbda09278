"""Keras 2 (``tf_keras``) in the doctor: its mixed-precision path self-tested next to Keras 3's.

Users of the TensorFlow image's tutorial write Keras 2 code (``tf.keras.mixed_precision``,
``get_scaled_loss`` / ``get_unscaled_gradients``); where tf_keras is installed the doctor runs the
same self-test through it — policy dtypes, a float32 output layer, an injected inf gradient
skipped with the scale halved — so a broken Keras 2 path shows up before a training run does.
"""

from __future__ import annotations

from .flavor import tf_keras, tf_keras_installed, tf_keras_version

#: the modes a Keras policy self-test means something for (fp8 has no Keras policy)
KERAS2_MODES = ("fp32", "tf32", "fp16", "bf16")


def selftest_variant(supported_modes, selftest) -> dict | None:
    """``{"label", "version", "modes": {mode: {"selftest", "detail"}}}`` for tf_keras, None without it.

    ``supported_modes``: the modes the main report found supported (the rest are skipped here too);
    ``selftest(mode, flavor)``: the doctor's self-test, run with the tf_keras flavour.
    """
    if not tf_keras_installed():
        return None
    flavor = tf_keras()
    modes = {}
    for mode in KERAS2_MODES:
        if mode not in supported_modes:
            modes[mode] = {"selftest": "skip", "detail": "not supported here (see the table)"}
            continue
        status, detail = selftest(mode, flavor)
        modes[mode] = {"selftest": status, "detail": detail}
    return {"label": f"tf_keras {tf_keras_version()}", "version": tf_keras_version(), "modes": modes}


def add_selftest(report, selftest, progress=None) -> None:
    """Add tf_keras's self-test to a TensorFlow doctor report as its ``tf_keras`` variant (nothing without tf_keras)."""
    if progress and tf_keras_installed():
        progress("tensorflow tf_keras self-test")
    variant = selftest_variant({m for m, r in report.modes.items() if r.supported}, selftest)
    if variant is not None:
        report.variants["tf_keras"] = variant
