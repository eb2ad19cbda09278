"""fp8 training for ``ampkit.keras.MixedPrecision("fp8")``: Keras 3's own float8 training
(``model.quantize("float8")``), not a copy of it.

``model = mp.prepare(model)`` (a built model, before ``compile``) quantizes the model's eligible
``Dense``/``EinsumDense`` layers with ``model.quantize("float8", filters=...)``; everything else
computes under the ``mixed_bfloat16`` policy, as in Keras's float8 training guide. By default the
first and last eligible layers stay in bfloat16 (the input projection and the logits carry the most
sensitive numerics; torch's fp8 does the same); ``fp8_skip_first_last=False`` converts them too.

What Keras's float8 layer computes (``Dense._float8_call``): inputs and kernel are quantized to
float8_e4m3fn and dequantized back with delayed (amax-history) scales, the output gradient to
float8_e5m2, and the matmul itself runs in the compute dtype. That is fp8's numerics everywhere;
fp8's speed only where XLA rewrites the quantize-dequantize-matmul pattern into an fp8 GEMM (an
NVIDIA GPU with compute capability >= 8.9). Elsewhere (a CPU, an older GPU) fp8 here is
**emulated**: ``mp.emulated`` is True and nothing claims a speed.

Keras 2 (``tf_keras``) and a Keras 3 without float8 quantization have no fp8 training: the mode is
refused in one line. Keras's torch and JAX backends are not offered (ampkit checks fp8 on the
TensorFlow backend only).
"""

from __future__ import annotations

from ...errors import ModeUnavailableError, UsageError
from ...precision import Precision

__all__ = ["FP8_KERAS", "FP8_LAYER_TYPES", "KerasFp8", "fp8_engine", "fp8_hardware", "fp8_support", "selftest"]

#: the policy fp8 runs under: quantized layers become ``float8_from_mixed_bfloat16``, the rest bfloat16
FP8_KERAS = Precision("fp8", "bfloat16", autocast=True, keras_policy="mixed_bfloat16")
#: the layer types Keras quantizes to float8
FP8_LAYER_TYPES = ("Dense", "EinsumDense")


def fp8_hardware() -> tuple[bool, str]:
    from .keras_modes import gpu_capabilities

    caps = gpu_capabilities()
    if not caps:
        return False, "TensorFlow sees no GPU"
    major, minor = caps[0]
    if (major, minor) >= (8, 9):
        return True, f"GPU with compute capability {major}.{minor} has fp8 matmuls"
    return False, f"GPU with compute capability {major}.{minor} has no fp8 matmuls (needs >= 8.9)"


def fp8_support(flavor=None, backend: str = "tensorflow") -> tuple[bool, bool, str]:
    """``(trainable, emulated, why)``: whether ``ampkit.keras`` can train in fp8 with ``flavor`` on
    Keras's ``backend``, and whether it is emulated (no fp8 hardware: numerics without speed)."""
    from .flavor import keras3

    flavor = flavor or keras3()
    if flavor.legacy:
        return False, False, "fp8 needs Keras 3's model.quantize('float8'); tf_keras (Keras 2) has no float8 training"
    if backend != "tensorflow":
        return False, False, f"ampkit's Keras fp8 runs on the TensorFlow backend only; Keras here runs on {backend}"
    keras = flavor.module
    try:
        from keras.src.dtype_policies.dtype_policy import QUANTIZATION_MODES as modes
    except ImportError:  # a Keras 3 before quantization (< 3.4)
        modes = ()
    if "float8" not in modes or not hasattr(keras.Model, "quantize"):
        return False, False, f"Keras {keras.__version__} has no float8 quantization (model.quantize('float8'), Keras >= 3.4)"
    native, hw = fp8_hardware()
    if native:
        return True, False, f"{hw}; Keras float8 layers (fp8 GEMMs where XLA rewrites them: jit_compile)"
    return True, True, (f"{hw}; fp8 numerics can be tried here in Keras's float8 layers (quantize-dequantize "
                        "around a bfloat16 matmul), without fp8 speed")


class KerasFp8:
    """The engine's fp8 part: which layers to quantize, the quantization, and what became of each."""

    def __init__(self, flavor, backend: str, skip_first_last: bool = True, layer_filter=None):
        ok, self.emulated, self.reason = fp8_support(flavor, backend)
        if not ok:
            raise ModeUnavailableError(f"mode 'fp8' cannot run here: {self.reason}")
        self.precision = FP8_KERAS
        self.flavor = flavor
        self.skip_first_last = bool(skip_first_last)
        self.layer_filter = layer_filter
        self.layers: list[dict] = []

    def _eligible(self, model) -> list:
        return [lay for lay in model._flatten_layers(include_self=False)
                if type(lay).__name__ in FP8_LAYER_TYPES and not list(lay._flatten_layers(include_self=False))]

    def convert(self, model):
        """Quantize ``model``'s eligible layers in place to Keras float8 (call before ``compile``)."""
        from .flavor import flavor_of

        if (flavor_of(model) or self.flavor).legacy:
            raise ModeUnavailableError("fp8 needs Keras 3's model.quantize('float8'); this is a tf_keras (Keras 2) model")
        if not getattr(model, "built", False) or not model.weights:
            raise UsageError("mp.prepare(model) needs a built model (give it a keras.Input, or call it once) "
                             "before fp8 quantizes its layers")
        if getattr(model, "optimizer", None) is not None and getattr(model.optimizer, "built", False):
            raise UsageError("mp.prepare(model) must come before the optimizer is built (before fit/compile): "
                             "float8 layers add scale variables the optimizer must not train")
        eligible = self._eligible(model)
        ends = {id(eligible[0]), id(eligible[-1])} if self.skip_first_last and eligible else set()
        plan = []
        for i, lay in enumerate(eligible):
            shape = [int(d) for d in lay.kernel.shape]
            if getattr(lay, "quantization_mode", None) == "float8":
                plan.append((lay, shape, False, "already float8"))
            elif getattr(lay, "quantization_mode", None):
                plan.append((lay, shape, False, f"already quantized to {lay.quantization_mode}"))
            elif id(lay) in ends:
                which = "first" if i == 0 else "last"
                plan.append((lay, shape, False, f"{which} {type(lay).__name__} of the model: kept in "
                                                f"{lay.compute_dtype} (fp8_skip_first_last=False converts it)"))
            elif self.layer_filter is not None and not self.layer_filter(lay):
                plan.append((lay, shape, False, "left out by fp8_filter"))
            elif getattr(lay, "compute_dtype", "float32") == "float32" and lay.dtype_policy.name == "float32":
                plan.append((lay, shape, False, "given dtype float32 explicitly: kept in float32"))
            else:
                plan.append((lay, shape, True, None))
        chosen = {id(lay) for lay, _, conv, _ in plan if conv}
        if chosen:
            model.quantize("float8", filters=lambda lay: id(lay) in chosen)
        self.layers = []
        for lay, shape, conv, why in plan:
            done = getattr(lay, "quantization_mode", None) == "float8" and conv
            if conv and not done:
                why = "Keras did not quantize it"
            self.layers.append({"name": lay.name, "type": type(lay).__name__, "shape": shape, "converted": done,
                                "reason": None if done else why})
        return model


def selftest() -> tuple[str, str]:
    """One fp8 step of a small Keras model through ``MixedPrecision("fp8")``, checked against the same
    step in bf16: the middle Dense quantized, its weights updated, its scales moved, losses close."""
    import math

    import numpy as np

    from ...errors import one_line
    from .keras_engine import MixedPrecision

    try:
        import keras

        from .tfimport import import_tf

        tf = import_tf()
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
        l8, l16 = losses["fp8"], losses["bf16"]
        if not math.isfinite(l8):
            return "fail", f"fp8 loss is {l8} on a clean batch"
        gap = abs(l8 - l16) / max(abs(l16), 1e-6)
        if gap > 0.05:
            return "fail", f"fp8 loss {l8:.4g} differs from bf16's {l16:.4g} by {gap:.1%} (expected < 5%)"
        return "pass", (f"one fp8 step through ampkit.keras ({detail}): middle Dense as Keras float8, loss {l8:.4g} "
                        f"within {gap:.2%} of bf16's, weights updated, amax history recorded")
    except Exception as exc:  # a self-test reports, it never crashes the doctor
        return "fail", f"fp8 step through ampkit.keras failed: {one_line(exc, 300)}"


def fp8_engine(mode, flavor, backend: str, skip_first_last: bool, layer_filter) -> KerasFp8 | None:
    """The Keras engine's fp8 part when ``mode`` is fp8, else None (the fp8 keywords are then refused)."""
    from ...precision import parse_mode

    if parse_mode(mode) != "fp8":
        if skip_first_last is not True or layer_filter is not None:
            raise UsageError(f"fp8_skip_first_last and fp8_filter are for mode 'fp8'; received mode {mode!r}")
        return None
    return KerasFp8(flavor, backend, skip_first_last, layer_filter)
