"""fp8 training for ``ampkit.keras.MixedPrecision("fp8")``: Keras 3's own float8 training
(``model.quantize("float8")``), not a copy of it."""

from __future__ import annotations

from ....errors import ModeUnavailableError, UsageError
from ....precision import Precision

__all__ = ["FP8_KERAS", "FP8_LAYER_TYPES", "KerasFp8", "fp8_engine", "fp8_support"]

#: the policy fp8 runs under: quantized layers become ``float8_from_mixed_bfloat16``, the rest bfloat16
FP8_KERAS = Precision("fp8", "bfloat16", autocast=True, keras_policy="mixed_bfloat16")
#: the layer types Keras quantizes to float8
FP8_LAYER_TYPES = ("Dense", "EinsumDense")


def fp8_support(flavor=None, backend: str = "tensorflow") -> tuple[bool, bool, str]:
    """``(trainable, emulated, why)``: whether ``ampkit.keras`` can train in fp8 with ``flavor`` on
    Keras's ``backend``, and whether it is emulated (no fp8 hardware: numerics without speed)."""
    from ..flavor import keras3

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
    from ..devices import fp8_hardware

    native, hw = fp8_hardware()
    if native:
        return True, False, (f"{hw}; Keras float8 layers: fp8 GEMMs only where XLA rewrites their "
                             "quantize-dequantize-matmul (jit_compile), which ampkit does not check")
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
        from ..flavor import flavor_of

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
                which = "only" if len(eligible) == 1 else "first" if i == 0 else "last"
                plan.append((lay, shape, False, f"{which} {type(lay).__name__} of the model: kept in "
                                                f"{lay.compute_dtype} (fp8_skip_first_last=False converts it)"))
            elif self.layer_filter is not None and not self.layer_filter(lay):
                plan.append((lay, shape, False, getattr(self.layer_filter, "words", "left out by fp8_filter")))
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
        if not any(d["converted"] for d in self.layers):
            import warnings

            warnings.warn("ampkit.keras fp8: no layer became Keras float8; the model trains in bfloat16 "
                          "(see mp.fp8_layers)", stacklevel=3)
        return model


def fp8_engine(mode, flavor, backend: str, skip_first_last: bool, layer_filter) -> KerasFp8 | None:
    """The Keras engine's fp8 part when ``mode`` is fp8, else None (the fp8 keywords are then refused)."""
    from ....precision import parse_mode

    if parse_mode(mode) != "fp8":
        if skip_first_last is not True or layer_filter is not None:
            raise UsageError(f"fp8_skip_first_last and fp8_filter are for mode 'fp8'; received mode {mode!r}")
        return None
    return KerasFp8(flavor, backend, skip_first_last, layer_filter)
