"""The TensorFlow ops doctor times that need no Keras engine, and the quick check behind ``auto``.

Kept apart from :mod:`.doctor_work` (which trains through ``ampkit.keras.MixedPrecision``) so that
``resolve_auto`` in the Keras engine can measure with the doctor's own code without an import
cycle. Every op ends in ``.numpy()``, which waits for the result, so host timing is right.
"""

from __future__ import annotations

import contextlib

from ...rounds import Work
from .tfimport import import_tensorflow

#: the quick check's matmul: tens of milliseconds for an emulated bf16, well under one for a native one
QUICK_MATMUL_N = 256


def _dtype(tf, mode: str):
    return {"fp16": tf.float16, "bf16": tf.bfloat16}.get(mode, tf.float32)


def in_mode(mode: str, fn):
    """``fn().numpy()`` with TF32 execution on for tf32 and off otherwise (restored after)."""
    tf = import_tensorflow()

    def call():
        prev = tf.config.experimental.tensor_float_32_execution_enabled()
        tf.config.experimental.enable_tensor_float_32_execution(mode == "tf32")
        try:
            return fn().numpy()
        finally:
            tf.config.experimental.enable_tensor_float_32_execution(prev)
    return call


def matmul_op(mode: str, n: int) -> tuple:
    """(callable, flops per call): an ``n``-square matmul in the mode's compute dtype."""
    tf = import_tensorflow()
    dtype = _dtype(tf, mode)
    a = tf.cast(tf.random.stateless_normal((n, n), seed=(1, 1)), dtype)
    b = tf.cast(tf.random.stateless_normal((n, n), seed=(1, 2)), dtype)
    return in_mode(mode, lambda: tf.linalg.matmul(a, b)), 2.0 * n**3


def conv_op(mode: str, shape: tuple) -> tuple:
    """(callable, flops per call): a 3x3 convolution ``(batch, h, w, c_in, c_out)`` in the mode's dtype."""
    tf = import_tensorflow()
    dtype = _dtype(tf, mode)
    bs, h, w, cin, cout = shape
    x = tf.cast(tf.random.stateless_normal((bs, h, w, cin), seed=(1, 3)), dtype)
    k = tf.cast(tf.random.stateless_normal((3, 3, cin, cout), seed=(1, 4)), dtype)
    return in_mode(mode, lambda: tf.nn.conv2d(x, k, 1, "SAME")), 2.0 * bs * h * w * cin * cout * 9


def size_work(mode: str, n: int) -> Work:
    """One ``n``-square matmul in the mode's compute dtype (:mod:`ampkit.doctor.sizes`)."""
    return Work({"matmul": matmul_op(mode, n)}, {})


def quick_auto(on_cpu: bool = True) -> dict:
    """fp32 against bf16 matmuls with the doctor's rounds and thresholds (on the CPU when ``on_cpu``,
    even where TensorFlow sees a GPU): a cache entry for :mod:`ampkit.auto`, in well under a
    second. Matmul only: a Keras training step would first have to be traced (seconds)."""
    from ...auto import quick_check

    tf = import_tensorflow()
    scope = tf.device("/CPU:0") if on_cpu else contextlib.nullcontext()
    with scope:
        def work(mode: str) -> Work:
            fn, flops = matmul_op(mode, QUICK_MATMUL_N)

            def on_device():
                with scope:
                    return fn()
            return Work({"matmul": (on_device, flops)}, {})
        return quick_check(work, None)
