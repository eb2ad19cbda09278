"""Inputs that fit a bare Keras model: what its first layers say it expects, and what was fed."""

from __future__ import annotations

import numpy as np

#: a Normalization whose mean is beyond this expects raw pixels (ImageNet means on 0-255: 103.9 to 123.7)
PIXEL_MEAN = 20.0


def _dtype_name(t) -> str:
    d = getattr(t, "dtype", "float32")
    return str(getattr(d, "name", d))


def _layers(model) -> list:
    try:
        return list(model._flatten_layers(include_self=False, recursive=True))
    except Exception:  # pragma: no cover - a model that cannot list its layers: no plan from them
        return []


def _first_after_input(model):
    """The first layer that computes on the model's input (Input layers left out), or None."""
    for lay in _layers(model):
        if type(lay).__name__ != "InputLayer":
            return lay
    return None


def input_plan(model) -> dict:
    """What to feed ``model`` (see docs/internals.md); a model with several inputs gets N(0, 1)."""
    try:
        inputs = list(model.inputs or [])
    except (AttributeError, ValueError, RuntimeError):
        inputs = []
    normal = {"kind": "normal", "range": None, "why": "standard-normal values (the model declares no other range)"}
    if len(inputs) != 1:
        return normal
    if "int" in _dtype_name(inputs[0]):
        dims = [int(lay.input_dim) for lay in _layers(model) if type(lay).__name__ == "Embedding"]
        if dims:
            return {"kind": "token_ids", "range": [0, min(dims) - 1],
                    "why": f"its integer input feeds an Embedding of {min(dims)} ids: uniform valid ids"}
        return {"kind": "integers", "range": [0, 1], "why": "its input is integer and no Embedding says a vocabulary"}
    first = _first_after_input(model)
    kind = type(first).__name__ if first is not None else ""
    if kind == "Rescaling":
        scale, offset = float(np.max(np.abs(first.scale))), float(np.max(first.offset))
        if 0 < scale < 0.5:  # it maps raw pixels to [0, 1] (offset 0) or [-1, 1] (offset -1)
            hi = round((1.0 - offset) / scale)
            return {"kind": "pixels", "range": [0, hi],
                    "why": f"its first layer rescales by {scale:.4g} (offset {offset:g}): raw pixels in [0, {hi}]"}
    if kind == "Normalization":
        mean = getattr(first, "mean", None)
        mean = float(np.max(np.asarray(mean))) if mean is not None else 0.0
        if mean > PIXEL_MEAN:
            return {"kind": "pixels", "range": [0, 255],
                    "why": f"its first layer normalises with means up to {mean:.4g}: raw pixels in [0, 255]"}
    return normal


def make_inputs(plan: dict, rng: np.random.Generator, n: int, shape) -> np.ndarray:
    """A batch of ``n`` inputs of per-sample ``shape`` drawn by ``plan``."""
    shape = (n, *shape)
    if plan["kind"] in ("token_ids", "integers"):
        lo, hi = plan["range"]
        return rng.integers(lo, hi + 1, shape).astype("int32")
    if plan["kind"] == "pixels":
        lo, hi = plan["range"]
        return rng.uniform(lo, hi, shape).astype("float32")
    return rng.standard_normal(shape).astype("float32")
