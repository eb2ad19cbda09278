"""Where inside a Keras layer an inf/NaN is made: the operation, its inputs' range, the layer that grew them."""

from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np

#: an upstream layer grew its outputs when they reach this many times its inputs' (and beyond fp16's max)
GROWTH = 1e3


def _amax(t) -> float | None:
    """max |t| of an eager float tensor (NaN when it holds one), None for anything else."""
    dtype = getattr(t, "dtype", None)
    if dtype is None or not getattr(dtype, "is_floating", False) or not hasattr(t, "numpy"):
        return None
    try:
        a = np.asarray(t.numpy(), dtype=np.float32)  # one host read per recorded operation
    except Exception:  # a symbolic tensor (graph construction): not recorded
        return None
    if not a.size:
        return 0.0
    return float(np.nan) if np.isnan(a).any() else float(np.abs(a).max())


def _finite(v: float | None) -> bool:
    return v is None or math.isfinite(v)


class OpRecorder:
    """Every eager operation run while :meth:`watching` a layer: ``(sublayer path, op type, input
    amaxes, output amax)`` in execution order (the path is ``""`` for the layer's own code)."""

    def __init__(self, legacy: bool = False):
        self.legacy = legacy
        self.ops: list[tuple[str, str, list, float | None]] = []
        self._stack: list[str] = []
        self._busy = False

    def _callback(self, op_type, inputs, attrs, outputs, op_name=None, graph=None):
        if self._busy or graph is not None:
            return None
        self._busy = True  # reading a tensor runs no op, but keep the callback from ever recursing
        try:
            kind = op_type.decode() if isinstance(op_type, bytes) else str(op_type)
            outs = [a for a in (_amax(o) for o in outputs or ()) if a is not None]
            if outs:
                ins = [_amax(t) for t in inputs or ()]
                worst = float(np.nan) if any(math.isnan(a) for a in outs) else max(outs)
                self.ops.append(("/".join(self._stack), kind, [a for a in ins if a is not None], worst))
        finally:
            self._busy = False
        return None

    @contextmanager
    def watching(self, layer):
        from tensorflow.python.framework import op_callbacks

        undo = []
        for sub in layer._flatten_layers(include_self=False, recursive=True):
            orig = sub.call

            def call(*args, _orig=orig, _name=sub.name, **kwargs):
                self._stack.append(_name)
                try:
                    return _orig(*args, **kwargs)
                finally:
                    self._stack.pop()
            object.__setattr__(sub, "call", call) if self.legacy else setattr(sub, "call", call)
            undo.append(sub)
        op_callbacks.add_op_callback(self._callback)
        try:
            yield self
        finally:
            op_callbacks.remove_op_callback(self._callback)
            for sub in undo:
                sub.__dict__.pop("call", None)

    def first_bad(self) -> tuple[int, tuple] | None:
        """The first operation whose output holds inf/NaN while its inputs are finite (its index, its row)."""
        for i, row in enumerate(self.ops):
            if not _finite(row[3]) and all(_finite(a) for a in row[2]):
                return i, row
        return None

    def occurrence(self, i: int) -> int:
        """How many operations of the same type and place ran before operation ``i``."""
        where, kind = self.ops[i][0], self.ops[i][1]
        return sum(1 for r in self.ops[:i] if r[0] == where and r[1] == kind)

    def nth(self, where: str, kind: str, n: int):
        rows = [r for r in self.ops if r[0] == where and r[1] == kind]
        return rows[n] if n < len(rows) else None


def _inputs(arrays: list):
    import tensorflow as tf

    ts = [tf.constant(a) for a in arrays]
    return ts[0] if len(ts) == 1 else ts


def run_recorded(layer, arrays: list, scope, legacy: bool) -> OpRecorder | None:
    """``layer`` called on ``arrays`` (its inputs, float32 numpy) as training runs, inside ``scope``
    (the engine's policy scope), with every operation recorded; None when the call fails."""
    rec = OpRecorder(legacy)
    try:
        with scope, rec.watching(layer):
            layer(_inputs(arrays), training=True)
    except Exception:  # a layer that cannot be called alone: the origin stays the layer
        return None
    return rec


def origin_op(aud_layer, ref_layer, arrays_a: list, arrays_r: list, aud_scope, ref_scope, legacy: bool) -> dict:
    """The operation inside ``aud_layer`` that made its first inf/NaN: ``{"op", "inputs_amax",
    "reference_amax"[, "sublayer"]}`` (``reference_amax``: what float32 computes for the same
    operation), or ``{}`` when the replay does not show one."""
    rec = run_recorded(aud_layer, arrays_a, aud_scope, legacy)
    hit = rec.first_bad() if rec else None
    if hit is None:
        return {}
    i, (where, kind, ins, _) = hit
    out = {"op": kind, "inputs_amax": [round(a, 6) for a in ins]}
    if where:
        out["sublayer"] = f"{aud_layer.name}/{where}"
    ref = run_recorded(ref_layer, arrays_r, ref_scope, legacy)
    row = ref.nth(where, kind, rec.occurrence(i)) if ref else None
    if row is not None:
        out["reference_amax"] = row[3] if math.isfinite(row[3]) else None
    return out


def inner_amax(layer, arrays: list, scope, legacy: bool) -> tuple[float, str | None]:
    """The largest magnitude any operation inside ``layer`` computes on ``arrays`` (float32), and that
    operation's type ("BatchMatMulV2"); (0, None) when it cannot be replayed."""
    rec = run_recorded(layer, arrays, scope, legacy)
    if not rec or not rec.ops:
        return 0.0, None
    row = max(rec.ops, key=lambda r: math.inf if not math.isfinite(r[3]) else r[3])
    return row[3], row[1]


def composite(layer) -> bool:
    """Whether ``layer`` holds sublayers (a custom layer's, a nested model's)."""
    return bool(layer._flatten_layers(include_self=False, recursive=False))


def is_custom(layer) -> bool:
    """Whether ``layer`` computes in code of its own worth looking inside: a class the user wrote, or
    one of Keras's holding sublayers (MultiHeadAttention); a nested Keras model is its own rows' sum."""
    if not (type(layer).__module__ or "").startswith(("keras.", "tf_keras.")):
        return True
    return composite(layer) and not hasattr(layer, "layers")


def upstream_cause(i: int, sources: list, amax_of, names: list) -> dict | None:
    """The layer upstream of row ``i`` whose float32 outputs grew the most beyond its inputs (at least
    :data:`GROWTH` times, and past fp16's max): ``{"name", "why"}``, or None. ``amax_of(j)``: row j's
    float32 output amax (j = -1: the model's input); ``sources[j]``: the rows feeding row j."""
    best, seen, todo = None, set(), list(sources[i] or [])
    while todo:
        j = todo.pop()
        if j < 0 or j in seen:
            continue
        seen.add(j)
        out = amax_of(j)
        ins = [amax_of(s) for s in (sources[j] or [])]
        grew_from = max([a for a in ins if math.isfinite(a)], default=0.0)
        if math.isfinite(out) and out > 65504 and out > GROWTH * max(grew_from, 1e-30):
            ratio = out / max(grew_from, 1e-30)
            if best is None or ratio > best[0]:
                best = (ratio, j, out, grew_from)
        todo.extend(sources[j] or [])
    if best is None:
        return None
    _, j, out, grew_from = best
    return {"name": names[j], "why": f"its float32 outputs reach {out:.3g} from inputs up to {grew_from:.3g}"}


def fp32_code(name: str, flavor, composite: bool) -> str:
    """Code keeping layer ``name`` of ``model`` in float32; for a layer with sublayers, every one of
    them too (a sublayer built under the mixed policy keeps computing in float16 otherwise, and the
    layer's own code then works on its float16 outputs)."""
    if not composite:
        return flavor.fp32_layer_code(name)
    setter = "layer._set_dtype_policy('float32')" if flavor.legacy else "layer.dtype_policy = 'float32'"
    return f"for layer in model.get_layer({name!r})._flatten_layers(): {setter}"


def _rows(counts: list, sources: list) -> list:
    """``sources`` (flat output indices, -1 a model input) as layer rows."""
    row_of = [r for r, c in enumerate(counts) for _ in range(c)]
    return [None if src is None else [-1 if k < 0 else row_of[k] for k in src] for src in sources]


def _row_amax(flat: list, counts: list, x):
    starts = np.cumsum([0, *counts])

    def amax_of(j: int) -> float:
        parts = [x] if j < 0 else flat[starts[j]:starts[j + 1]]
        vals = [float(np.abs(np.asarray(p, dtype=np.float64)).max()) for p in parts
                if p is not None and np.asarray(p).size and np.asarray(p).dtype.kind == "f"]
        return max(vals, default=0.0)
    return amax_of


def origin_of(session, i: int, step_seed: int) -> dict:
    """What a forward failure at row ``i`` of a :class:`~..audit.KerasAuditSession` adds to its
    ``first_nonfinite``: the operation inside the layer (:func:`origin_op`), and when the float32
    reference is non-finite too, where it first is and the upstream layer that grew its inputs."""
    out: dict = {}
    src, x = session.sources[i], session.x
    if src is not None and (all(j >= 0 for j in src) or isinstance(x, np.ndarray)):
        arrays_a = [session.flat_a[j] if j >= 0 else x for j in src]
        arrays_r = [session.flat_r[j] if j >= 0 else x for j in src]
        out.update(origin_op(session.aud_layers[i], session.ref_layers[i], arrays_a, arrays_r,
                             session._engine(session.scale).scope(), session.mp_ref.scope(), session.flavor.legacy))
    starts = np.cumsum([0, *session.counts])
    ref_bad = next((j for j in range(len(session.names))
                    if any(not np.isfinite(session.flat_r[k]).all() for k in range(starts[j], starts[j + 1]))), None)
    if ref_bad is not None:
        out["reference_origin"] = {"name": session.names[ref_bad]}
        rows = _rows(session.counts, session.sources)
        cause = upstream_cause(ref_bad, rows, _row_amax(session.flat_r, session.counts,
                                                        x if isinstance(x, np.ndarray) else None), session.names)
        if cause:
            out["cause"] = cause
    return out
