"""The model and batch a Keras audit runs on from the CLI, and what its document says was fed.

Two sources: the user's data (``--data MODULE:FACTORY``: its first batch) or the workload's
``make_batch`` (a bare model's fits its input layer, :mod:`.workloads.inputs`). The data is what
Keras parity takes: ``(inputs, targets)`` NumPy arrays (batched here at the audit's batch size), a
batched ``tf.data.Dataset`` (its first element, its own batch), or ``(train, validation)`` of those
(the train part). With ``--data`` the data is read first: a bare model takes its per-sample input
shape from it, and an ``--input-shape`` that says otherwise is one line (:func:`ampkit.checks.shape_from_data`).
The loss follows the targets: class ids get the model's own loss (:func:`.workloads.model_head`),
other float targets mean squared error (a binary head keeps its binary cross-entropy).
"""

from __future__ import annotations

import numpy as np

from ...checks import shape_from_data
from ...errors import UsageError
from ...factory import call_user, load_factory


def _is_pair(obj) -> bool:
    return isinstance(obj, (tuple, list)) and len(obj) == 2


def user_data(spec: str):
    """What ``--data``'s factory returns, checked: ``(x, y)`` arrays or a ``tf.data.Dataset`` of
    ``(inputs, targets)`` elements (parity's ``(train, validation)``: the train part)."""
    from .parity_data import check_part, is_dataset

    obj = call_user(load_factory(spec, flag="--data"), spec)
    if _is_pair(obj) and all(is_dataset(p) or (_is_pair(p) and all(hasattr(q, "__array__") for q in p)) for p in obj):
        obj = obj[0]  # parity's (train, validation): the train part
    if is_dataset(obj):
        if int(obj.cardinality()) == 0:
            raise UsageError(f"{spec}: the audit data set is empty")
        spec_ = obj.element_spec
        if not (isinstance(spec_, tuple) and len(spec_) in (2, 3)):
            raise UsageError(f"{spec}: each element of the tf.data.Dataset must be (inputs, targets); "
                             f"its element_spec is {spec_}")
        return obj
    return check_part(obj, "audit", spec)


def first_batch(data, spec: str, batch_size: int) -> tuple:
    """``(x, y)`` NumPy arrays: the first ``batch_size`` samples of arrays, a dataset's first element."""
    if isinstance(data, tuple):
        return data[0][:batch_size], data[1][:batch_size]
    import tensorflow as tf

    for element in data.take(1):  # inputs keep their structure (a dict of a multi-input model's)
        return tuple(tf.nest.map_structure(np.asarray, t) for t in element[:2])
    raise UsageError(f"{spec}: the audit data set is empty")


def describe(x, spec: str) -> dict:
    """The document's ``input``: what the user's batch was (kind ``data``, its dtype, shape and range)."""
    if isinstance(x, dict):  # a multi-input model's: each input described under its key
        return {"kind": "data", "from": spec, "inputs": {k: _array_doc(v) for k, v in x.items()}}
    return {"kind": "data", "from": spec, **_array_doc(x)}


def _array_doc(x) -> dict:
    a = np.asarray(x)
    doc = {"dtype": str(a.dtype), "shape": list(a.shape)}
    if a.size and a.dtype.kind in "iuf":
        doc.update(min=float(a.min()), max=float(a.max()))
    return doc


def data_loss(probe, y):
    """The loss for the user's targets: the workload's for class ids (or a binary head's 0/1 floats),
    mean squared error for other float targets."""
    binary = isinstance(probe.loss, str) and probe.loss.startswith("binary")
    if np.asarray(y).dtype.kind in "iub" or binary or not isinstance(probe.loss, str):
        return probe.keras_loss()
    return probe.flavor.module.losses.MeanSquaredError()


def session_inputs(config) -> tuple:
    """``(probe, build_model, x, y, loss, notes, fed)`` for a CLI audit of ``config``'s workload or model."""
    from .workloads import build_workload

    sizes = {k: v for k, v in (("seq_len", config.seq_len), ("image_size", config.image_size)) if v}
    data, input_shape = None, config.input_shape
    if config.data:
        data = user_data(config.data)
        x1, _ = first_batch(data, config.data, 1)
        one = isinstance(x1, np.ndarray)  # one input array: its per-sample shape (a dict of inputs: none)
        input_shape = shape_from_data(config.input_shape, x1.shape[1:] if one else None, config.data)
    args = (config.workload, config.model, input_shape, config.num_classes)
    probe = build_workload(*args, sizes=sizes)
    if data is not None:
        x, y = first_batch(data, config.data, config.batch_size or probe.batch_size)
        loss, notes, fed = data_loss(probe, y), (), describe(x, config.data)
    else:
        x, y = probe.make_batch(config.batch_size or probe.batch_size, config.seed)
        loss = probe.keras_loss()
        notes = (f"input: {probe.input['why']}",) if probe.input and probe.input["kind"] != "normal" else ()
        fed = dict(probe.input or {"kind": "normal", "range": None, "why": "standard-normal values"})
    if isinstance(loss, str):
        loss = probe.flavor.module.losses.get(loss)
    return probe, lambda: build_workload(*args, sizes=sizes).model, x, y, loss, notes, fed
