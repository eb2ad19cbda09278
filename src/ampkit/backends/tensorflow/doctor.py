"""Doctor for TensorFlow/Keras: the policies' self-tests and the work doctor times (the flow:
:mod:`ampkit.doctor.driver`)."""

from __future__ import annotations

import contextlib
import math

from ...errors import one_line
from ...precision import get_precision
from ...rounds import Work
from . import doctor_work
from .environment import grow_gpu_memory, import_tensorflow


def selftest(mode: str, flavor=None) -> tuple[str, str]:
    """Build and train a tiny Keras model in the mode's policy; check what Keras really did.

    ``flavor``: which Keras (:mod:`.flavor`); Keras 3 by default, tf_keras for the Keras 2 self-test.
    """
    from .engine.mixed_precision import MixedPrecision, loss_scale_of
    from .flavor import keras3

    tf = import_tensorflow()
    flavor = flavor or keras3()
    keras = flavor.module
    if mode == "fp8":  # a real fp8 step through the engine's Keras float8 layers (engine/fp8.py)
        from .doctor_fp8 import selftest as fp8_selftest
        from .engine.fp8 import fp8_support

        ok, _, why = fp8_support(flavor)
        return fp8_selftest() if ok else ("fail", why)

    try:
        mp = MixedPrecision(mode, initial_scale=2.0**8, dynamic_growth_steps=1000, keras=flavor)
        keras.utils.set_random_seed(0)
        with mp.scope():
            inputs = keras.Input((16,))
            h = keras.layers.Dense(32, activation="relu", name="hidden")(inputs)
            out = keras.layers.Dense(4, dtype="float32", name="logits")(h)
            model = keras.Model(inputs, out)
            opt = mp.optimizer(keras.optimizers.SGD(0.1))
        want = get_precision(mode).compute_dtype if get_precision(mode).autocast else "float32"
        hidden = model.get_layer("hidden")
        checks = []
        if hidden.compute_dtype != want or hidden.variable_dtype != "float32":
            return "fail", (f"Dense under policy {mp.policy} computes in {hidden.compute_dtype} with "
                            f"{hidden.variable_dtype} variables; expected {want} / float32")
        x = tf.random.stateless_normal((8, 16), seed=(1, 2))
        y = tf.constant([0, 1, 2, 3, 0, 1, 2, 3])
        out_dtype = hidden(x).dtype.name  # the layer itself under its policy (no second Model to build)
        if out_dtype != want:
            return "fail", f"Dense output is {out_dtype}, expected {want}"
        checks.append(f"Dense computes {want}, variables float32")
        if model(x).dtype.name != "float32":
            return "fail", f"the float32 output layer returned {model(x).dtype.name}"
        checks.append("float32 output layer")
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        w0 = hidden.kernel.numpy().copy()
        loss = mp.train_step(model, opt, x, y, loss_fn)
        if not math.isfinite(float(loss)) or (hidden.kernel.numpy() == w0).all():
            return "fail", "a clean training step did not update the weights"
        checks.append("step updates weights")
        if get_precision(mode).loss_scaling:
            before = loss_scale_of(opt)
            w1 = hidden.kernel.numpy().copy()
            grads = [tf.fill(v.shape, float("inf")) for v in model.trainable_variables]  # injected overflow
            flavor.apply(opt, grads, model.trainable_variables)
            after = loss_scale_of(opt)
            if not (hidden.kernel.numpy() == w1).all():
                return "fail", "an injected inf gradient was applied instead of skipped"
            if after != before * 0.5:
                return "fail", f"LossScaleOptimizer did not halve on inf: {before} -> {after}"
            checks.append(f"inf gradient skipped, scale {before:g} -> {after:g}")
        return "pass", "; ".join(checks)
    except Exception as exc:
        return "fail", one_line(exc, 300)


def one_measuring_thread(threads: int = 1) -> bool:
    """On a CPU, TensorFlow's ops on one thread, as the PyTorch doctor times them: the ratio of per-core
    speeds is what a mode changes, and on a shared CPU a two-thread op waits at every barrier for a
    descheduled thread (measured under load 12, a transformer block's training step: 37-137 ms on two
    threads, bf16/fp32 0.4-4.6x from one run to the next; 104-120 ms on one, 1.4-1.6x). Only in the
    ``ampkit`` program itself (:func:`ampkit.outputs.owns_process`) and before TensorFlow ran an op:
    its thread pools cannot be changed back, and a library caller's process keeps its own. True when set.
    ``threads``: the count (``--threads``; one by default, :mod:`ampkit.threads`)."""
    from ...outputs import owns_process

    return owns_process() and set_threads(threads)


def set_threads(threads: int) -> bool:
    """TensorFlow's intra- and inter-op pools at ``threads``, in a process that is ampkit's (the
    program, a bench child); True when set, False when TensorFlow already ran an op here."""
    tf = import_tensorflow()
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:  # TensorFlow already ran an op in this process: its pools are made
        return False
    return True


class TensorFlowDoctor:
    """:class:`ampkit.doctor.ops.DoctorOps` for TensorFlow/Keras (the flow: :mod:`ampkit.doctor.driver`)."""

    @contextlib.contextmanager
    def doctor_session(self, target, threads=None):
        grow_gpu_memory()  # the doctor only looks: GPU memory as it needs it, not all of it at the first op
        if threads is not None:
            one_measuring_thread(threads)
        yield

    def selftest(self, mode: str, target) -> tuple[str, str]:
        return selftest(mode)

    def doctor_work(self, mode: str, target) -> Work:
        return doctor_work.work(mode, gpu=target.accelerator)

    def auto_fingerprint(self, target) -> dict:
        from .engine.mixed_precision import auto_fingerprint

        return auto_fingerprint(cpu=not target.accelerator)

    def doctor_variants(self, supported, target, say, *, thorough: bool = False) -> dict[str, dict]:
        """tf_keras's mixed-precision path self-tested beside Keras 3's, where tf_keras is installed:
        always where ``tf.keras`` is tf_keras (``TF_USE_LEGACY_KERAS=1``), else only when ``thorough``."""
        from . import doctor_keras2 as keras2

        return keras2.variants(supported, selftest, say, thorough=thorough)
