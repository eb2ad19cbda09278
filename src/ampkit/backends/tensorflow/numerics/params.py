"""The gradients a real Keras step checks: each trainable variable's, watched like the layers' outputs."""

from __future__ import annotations

import math

import numpy as np

from ....compare import relative_error
from ....formats import FP32
from ..environment import import_tensorflow


def variable_name(v) -> str:
    """``conv1_conv/kernel`` (Keras 3's ``path``; tf_keras's ``name`` without ``:0``)."""
    path = getattr(v, "path", None)
    if isinstance(path, str) and path:
        return path
    name = str(getattr(v, "name", "variable"))
    return name[:-2] if name.endswith(":0") else name


class ParamGrads:
    """The trainable variables of a model whose top-level ``layers`` are audited, each with its owner."""

    def __init__(self, layers, model):
        self.variables = list(model.trainable_variables)
        owner = {}
        for i, lay in enumerate(layers):
            for v in lay.trainable_weights:
                owner.setdefault(id(v), i)
        self.owner = [owner.get(id(v)) for v in self.variables]
        self.names = [variable_name(v) for v in self.variables]
        self.last: list = []

    def __len__(self) -> int:
        return len(self.variables)

    def reduce(self, grads, against=None, scale: float = 1.0) -> np.ndarray:
        """``(n, 4)`` float64: each gradient's amax (float32, NaN ignored), its count of inf/NaN (0 for a
        variable the loss does not reach), and against the reference's gradients ``against`` (the
        float32 pass's, kept in :attr:`last`) ``||g / scale - ref||**2`` and ``||ref||**2`` (0 without).
        One host read for all of them; the gradients are kept in :attr:`last` until the next call."""
        tf = import_tensorflow()
        self.last = list(grads)
        if not grads:
            return np.zeros((0, 4))
        rows = []
        for j, g in enumerate(grads):
            if g is None:
                rows.append(tf.zeros((4,), tf.float32))
                continue
            g = _dense(g, tf)
            finite = tf.math.is_finite(g)
            amax = tf.reduce_max(tf.where(finite, tf.abs(g), tf.zeros_like(g))) if tf.size(g) > 0 else tf.constant(0.0)
            bad = tf.reduce_sum(tf.cast(tf.logical_not(finite), tf.float32))
            ref = against[j] if against is not None else None
            if ref is None or tuple(ref.shape) != tuple(g.shape):
                rows.append(tf.stack([amax, bad, 0.0, 0.0]))
                continue
            ref = _dense(ref, tf)
            diff = g / scale - ref
            rows.append(tf.stack([amax, bad, tf.reduce_sum(diff * diff), tf.reduce_sum(ref * ref)]))
        return tf.stack(rows).numpy().astype(np.float64)  # one host transfer for every variable

    def bad_names(self, reduced: np.ndarray, layer: int) -> list[str]:
        """The variables of ``layer`` whose gradient held inf/NaN."""
        return [n for n, o, r in zip(self.names, self.owner, reduced) if o == layer and r[1] > 0]


def _dense(g, tf):
    if isinstance(g, tf.IndexedSlices):  # an Embedding's gradient: as the dense tensor the optimizer applies
        g = tf.convert_to_tensor(g)
    return tf.cast(g, tf.float32)


class ParamLedger:
    """What the measured passes of an audit saw of the variables' gradients, per layer row: the
    float32 reference's amax (max over steps), the audited pass's inf/NaN count at the audited
    scale, and every variable whose gradient was inf/NaN in some measured pass (a back-off included)
    with the largest such scale -- the fields of :class:`~ampkit.audit.report.LayerStats`."""

    def __init__(self, params: ParamGrads):
        self.params = params
        self.overflow: dict[int, tuple[list[str], float]] = {}

    def saw(self, audited: np.ndarray, scale: float) -> None:
        """One measured audited pass at ``scale`` (before a back-off decides whether it counts)."""
        for i in {o for o in self.params.owner if o is not None}:
            bad = self.params.bad_names(audited, i)
            if bad:
                names, top = self.overflow.get(i, ([], 0.0))
                self.overflow[i] = (names + [n for n in bad if n not in names], max(top, scale))

    def record(self, stats: list, reference: np.ndarray, audited: np.ndarray) -> None:
        """Add the measured step to ``stats`` (the layers' LayerStats, in row order)."""
        for i, st in enumerate(stats):
            mine = [j for j, o in enumerate(self.params.owner) if o == i]
            if not mine:
                continue
            amax = float(max(reference[j][0] for j in mine))
            st.param_grad_amax = amax if st.param_grad_amax is None else max(st.param_grad_amax, amax)
            st.param_grad_nonfinite += int(sum(audited[j][1] for j in mine))
            diff2, ref2 = sum(audited[j][2] for j in mine), sum(audited[j][3] for j in mine)
            if not any(audited[j][1] for j in mine):  # its gradients as the optimizer gets them (float32)
                size = sum(math.prod(int(d) for d in self.params.variables[j].shape) for j in mine)
                err = relative_error(float(np.sqrt(diff2)), float(np.sqrt(ref2)), size, FP32)
                st.param_grad_rel_error = err if st.param_grad_rel_error is None else max(st.param_grad_rel_error, err)
            if i in self.overflow:
                names, top = self.overflow[i]
                st.param_grad_overflow = {"params": list(names), "loss_scale": top}
