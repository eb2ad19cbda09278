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


#: why a tf_keras self-test was deferred (the doctor without ``--thorough``, where tf.keras is Keras 3)
DEFERRED = ("self-test deferred: tf.keras is Keras 3 here, and tf_keras's path cannot change the recommendation "
            "(`ampkit doctor --thorough`, or TF_USE_LEGACY_KERAS=1, runs it)")


def variants(supported_modes, selftest, say, *, thorough: bool = True) -> dict[str, dict]:
    """The doctor report's ``variants`` for TensorFlow: ``{"tf_keras": ...}`` where tf_keras is
    installed (``say`` hears that its self-test runs), else ``{}``. Unless ``thorough`` or ``tf.keras``
    is tf_keras, the self-test is deferred and the entry says so (``"deferred"``, no modes)."""
    if not tf_keras_installed():
        return {}
    if not thorough:
        from .flavor import TF_KERAS, tf_keras_target

        if not tf_keras_target().startswith(TF_KERAS):
            version = tf_keras_version()
            return {"tf_keras": {"label": f"tf_keras {version}", "version": version, "modes": {}, "deferred": DEFERRED}}
    say("tf_keras self-test")
    return {"tf_keras": selftest_variant(supported_modes, selftest)}
