"""A precision plan on a Keras model, through per-layer dtype policies (Keras 3 and tf_keras)."""

from __future__ import annotations

from ....plan_format import Plan, keep_fp32_plan

__all__ = ["KerasIslands", "keras_plan"]

LOW = ("float16", "bfloat16")


def keras_plan(mode: str, keep_fp32) -> Plan | None:
    """The plan of ``ampkit.keras.MixedPrecision(mode, keep_fp32=...)`` (:func:`ampkit.plan_format.keep_fp32_plan`)."""
    return keep_fp32_plan(mode, keep_fp32, "tensorflow", "layer")


def _names(layer) -> list[str]:
    out = [layer.name]
    path = getattr(layer, "path", None)
    if isinstance(path, str) and path not in out:
        out.append(path)
    return out


def _inner(layer) -> list:
    return list(layer._flatten_layers(include_self=True)) if hasattr(layer, "_flatten_layers") else [layer]


class KerasIslands:
    """One engine's plan on its Keras model: which layers were set to float32, which stay out of fp8."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.kept: list[str] = []         # names of the layers (and their inner layers) set to float32
        self._out_of_fp8: set[int] = set()

    def apply(self, model) -> None:
        from ..flavor import flavor_of

        layers = list(model._flatten_layers(include_self=False))
        named = [(n, type(lay).__name__) for lay in layers for n in _names(lay)]
        resolved = self.plan.resolve(named)
        legacy = bool((flavor_of(model) or None) and flavor_of(model).legacy)
        self.kept, self._out_of_fp8 = [], set()
        for lay in layers:
            hit = next((resolved[n] for n in _names(lay) if n in resolved), None)
            if hit is None:
                continue
            for inner in _inner(lay):
                self._out_of_fp8.add(id(inner))
                if hit[0] == "fp32":
                    if legacy:
                        inner._set_dtype_policy("float32")
                    else:
                        inner.dtype_policy = "float32"
                    if inner.name not in self.kept:
                        self.kept.append(inner.name)

    def fp8_filter(self, user_filter=None):
        """The layer filter fp8 quantizes through: not in the plan, and the user's own says yes."""
        def keep(lay) -> bool:
            return id(lay) not in self._out_of_fp8 and (user_filter is None or user_filter(lay))
        keep.words = "kept out of fp8 by the plan" + (" (or your fp8_filter)" if user_filter is not None else "")
        return keep

    def findings(self, model) -> list[dict]:
        """A kept layer computing in float16/bfloat16: the plan is declared but not applied."""
        out = []
        for lay in model._flatten_layers(include_self=False):
            if lay.name in self.kept and getattr(lay, "compute_dtype", None) in LOW:
                out.append({"where": f"layer {lay.name} ({type(lay).__name__})", "expected": "float32 compute (kept by the plan)",
                            "actual": f"{lay.compute_dtype} compute",
                            "advice": "call model = mp.prepare(model) after building it and before compile/fit",
                            "check": "plan"})
        return out
