"""The Keras callback's look inside the layer that failed, on the failing batch itself (issue #46)."""

from __future__ import annotations

import contextlib
import math

from ..numerics.origin import OpRecorder, is_custom

#: positional tensor arguments kept per call (a layer taking more is called with the first ones only)
MAX_ARGS = 3


class FailingCalls:
    """The inputs of each custom layer's non-finite call in one batch (see docs/internals.md)."""

    def __init__(self, tf, layers: list, names: list[str], legacy: bool) -> None:
        self.tf, self.layers, self.names, self.legacy = tf, layers, names, legacy
        # layer index -> (filled flag, [variables], [one list argument, how many arguments])
        self.kept: dict[int, tuple] = {}
        for i, lay in enumerate(layers):
            if is_custom(lay):
                self.kept[i] = (tf.Variable(0.0, trainable=False, dtype=tf.float32),
                                [tf.Variable(tf.zeros([0]), shape=tf.TensorShape(None), trainable=False,
                                             validate_shape=False, dtype=tf.float32) for _ in range(MAX_ARGS)],
                                [False, 0])

    def flags(self) -> list:
        """The per-layer flags, for the watch's one read at the batch end."""
        return [k[0] for k in self.kept.values()]

    def keep(self, i: int, args, amax) -> None:
        """Inside layer ``i``'s wrapped call: keep its inputs when its output's ``amax`` is non-finite."""
        kept = self.kept.get(i)
        if kept is None:
            return
        tf = self.tf
        one_list = len(args) == 1 and isinstance(args[0], (list, tuple))
        xs = [a for a in (args[0] if one_list else args) if tf.is_tensor(a) and a.dtype.is_floating][:MAX_ARGS]
        if not xs:
            return
        kept[2][:] = [one_list, len(xs)]   # known when the call is traced

        def store():
            for v, x in zip(kept[1], xs):
                v.assign(tf.cast(x, tf.float32))
            kept[0].assign(1.0)
            return tf.constant(True)
        tf.cond(tf.math.is_finite(amax), lambda: tf.constant(False), store)

    def explain(self, filled: list[float], order: list[int], recipient: str) -> dict | None:
        """The origin of the batch's first inf/NaN, for :meth:`TrainRecord.locate_origin`: ``{"name",
        "op", "in_reference", "recipient", "traced", "inputs_amax"[, "reference_amax"]}``, or None. The
        flags are cleared for the next batch either way."""
        full = [i for i, f in zip(self.kept, filled) if f > 0]
        ranked = sorted(full, key=lambda i: order.index(i) if i in order else len(order))
        found = None
        for i in ranked:   # completion order: an inner layer before the one holding it
            name = self.names[i]
            if name != recipient and not recipient.startswith(name + "/"):
                continue   # the layer the watch saw fail first is neither this one nor inside it
            found = self._replay(i)
            if found is not None:
                found = {**found, "recipient": recipient, "traced": "failing step"}
                break
        for flag, _vs, _n in self.kept.values():   # the replays called the wrapped layers too
            flag.assign(0.0)
        return found

    def _replay(self, i: int) -> dict | None:
        layer, (_flag, vs, (one_list, n_args)) = self.layers[i], self.kept[i]
        arrays = [v.numpy() for v in vs[:n_args]]
        rec = self._recorded(layer, arrays, one_list)
        hit = rec.first_bad() if rec else None
        if hit is None:
            return None
        n, (where, kind, ins, _) = hit
        out = {"name": self.names[i] + (f"/{where}" if where else ""), "phase": "forward", "op": kind,
               "in_reference": False, "inputs_amax": [round(a, 6) for a in ins]}
        ref = self._in_float32(layer, arrays, one_list)
        row = ref.nth(where, kind, rec.occurrence(n)) if ref else None
        if row is not None:
            out["in_reference"] = not math.isfinite(row[3])
            out["reference_amax"] = row[3] if math.isfinite(row[3]) else None
        return out

    def _recorded(self, layer, arrays: list, one_list: bool) -> OpRecorder | None:
        """``layer`` called eagerly on ``arrays`` as training runs, every operation recorded; None when the
        call fails (a layer that cannot be called alone: the origin stays the layer the watch named)."""
        tf, rec = self.tf, OpRecorder(self.legacy)
        xs = [tf.constant(a) for a in arrays]
        try:
            with rec.watching(layer):
                layer(xs, training=True) if one_list else layer(*xs, training=True)
        except Exception:
            return None
        return rec

    def _in_float32(self, layer, arrays: list, one_list: bool):
        """The same call with ``layer`` and its sublayers computing in float32 (their variables are
        float32 already), the policies put back after; None where a policy cannot be set."""
        subs = [layer, *layer._flatten_layers(include_self=False, recursive=True)]
        before = [s.dtype_policy for s in subs]
        try:
            for s in subs:
                s._set_dtype_policy("float32") if self.legacy else setattr(s, "dtype_policy", "float32")
            return self._recorded(layer, arrays, one_list)
        except Exception:   # a layer whose policy is fixed: nothing claimed about float32
            return None
        finally:
            for s, p in zip(subs, before):
                with contextlib.suppress(Exception):
                    s._set_dtype_policy(p) if self.legacy else setattr(s, "dtype_policy", p)
