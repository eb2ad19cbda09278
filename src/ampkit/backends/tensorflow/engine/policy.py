"""The user's own global dtype policy, found when ``ampkit.keras.MixedPrecision`` is made."""

from __future__ import annotations

import warnings

from ..flavor import Flavor, loaded_flavors

#: the mode each non-float32 policy's compute dtype maps to
POLICY_MODE = {"mixed_float16": "fp16", "float16": "fp16", "mixed_bfloat16": "bf16", "bfloat16": "bf16"}


class GlobalPolicyFound(UserWarning):
    """A global Keras dtype policy other than float32 was set before ``ampkit.keras.MixedPrecision``."""


def policy_name(policy) -> str:
    return str(getattr(policy, "name", policy))


def found_policy(first: Flavor) -> tuple[Flavor, str] | None:
    """The Keras (``first`` asked first) and the name of a global policy other than float32 set in it, None
    when every imported Keras is at float32. Nothing is imported here: a Keras not imported has no policy set."""
    for flavor in [first] + [f for f in loaded_flavors() if f != first]:
        if flavor.name not in {f.name for f in loaded_flavors()}:
            continue
        try:
            name = policy_name(flavor.global_policy())
        except Exception:  # pragma: no cover - a Keras that cannot say
            continue
        if name != "float32":
            return flavor, name
    return None


def adopt(requested: str, found: tuple[Flavor, str] | None) -> tuple[str, str | None]:
    """The mode to resolve (``auto`` becomes the found policy's mode) and the one line to report (None
    when no policy was found)."""
    from ....precision import AUTO, parse_mode

    if found is None:
        return requested, None
    flavor, name = found
    mode = POLICY_MODE.get(name)
    head = f"ampkit.keras: the global {flavor.label} dtype policy {name!r} was set before ampkit"
    want = parse_mode(requested)
    if want == AUTO:
        if mode is None:
            return requested, f"{head}; 'auto' chooses on its own (ampkit has no mode for {name!r})"
        return mode, f"{head}; 'auto' adopts it: {mode}"
    if mode == want:
        return requested, f"{head}; {want} matches it"
    compute = "float16" if mode == "fp16" else ("bfloat16" if mode == "bf16" else name)
    extra = (" (models built outside mp.scope() still compute in float16: mp.optimizer keeps loss scaling for them)"
             if mode == "fp16" else f" (models built outside mp.scope() still compute in {compute})")
    return requested, f"{head}; mode {want} overrides it inside mp.scope(){extra}"


def report(line: str | None) -> None:
    if line:
        warnings.warn(line, GlobalPolicyFound, stacklevel=3)


# ------------------------------------------------------------------------------------ the layers
def layers_of(model) -> list:
    """Every layer of ``model`` that holds no layers itself (nested models and blocks flattened)."""
    out = []
    for layer in getattr(model, "layers", []) or []:
        inner = getattr(layer, "layers", None)
        if inner:
            out.extend(layers_of(layer))
        else:
            out.append(layer)
    return out


def float16_layers(model) -> list[str]:
    """Names of the layers of ``model`` that compute in float16."""
    return [lay.name for lay in layers_of(model) if getattr(lay, "compute_dtype", None) == "float16"]
