"""A caller's data for Keras parity: ``(inputs, targets)`` arrays or batched ``tf.data.Dataset``s,
and the checks that run before any training (:func:`prepare`)."""

from __future__ import annotations

import dataclasses

import numpy as np

from ...errors import UsageError, one_line
from ...factory import call_user
from ...parity.ops import ParityData, of_targets


def is_dataset(obj) -> bool:
    import tensorflow as tf

    return isinstance(obj, tf.data.Dataset)


def check_part(obj, part: str, spec: str, steps: int | None = None):
    """``(x, y)`` NumPy arrays, or the dataset as it is; a usage error for anything else or an empty set."""
    if is_dataset(obj):
        import tensorflow as tf

        if int(obj.cardinality()) == 0:
            raise UsageError(f"{spec}: the {part} data set is empty")
        if int(obj.cardinality()) == int(tf.data.INFINITE_CARDINALITY) and (part != "train" or not steps):
            raise UsageError(f"{spec}: the {part} tf.data.Dataset repeats forever (.repeat() without a count): "
                             + ("an endless stream has no epochs; give --steps N" if part == "train" else
                                "validation reads its data to the end; repeat it a finite number of times"))
        spec_ = obj.element_spec
        if not (isinstance(spec_, tuple) and len(spec_) in (2, 3)):
            raise UsageError(f"{spec}: each element of the {part} tf.data.Dataset must be (inputs, targets); "
                             f"its element_spec is {spec_}")
        return obj
    if isinstance(obj, (tuple, list)) and len(obj) == 2:
        try:
            x, y = np.asarray(obj[0]), np.asarray(obj[1])
        except Exception as exc:
            raise UsageError(f"{spec}: the {part} (inputs, targets) are not arrays: {one_line(exc)}") from None
        if x.ndim == 0 or y.ndim == 0 or len(x) != len(y):
            raise UsageError(f"{spec}: the {part} inputs and targets have different lengths "
                             f"({x.shape} and {y.shape})")
        if len(x) == 0:
            raise UsageError(f"{spec}: the {part} data set is empty")
        return x, y
    raise UsageError(f"{spec}: the {part} data is a {type(obj).__name__}; expected a tf.data.Dataset or an "
                     "(inputs, targets) pair of arrays")


def first_batch(obj, batch_size: int):
    if isinstance(obj, tuple):
        return obj[0][:batch_size], obj[1][:batch_size]
    for element in obj.take(1):
        return element[0], element[1]
    return None


def default_loss(model, class_targets: bool):
    """Cross-entropy for class targets (on probabilities after a final softmax, else logits), else MSE."""
    import keras

    if not class_targets:
        return keras.losses.MeanSquaredError()
    from .workloads import model_head

    loss_key = model_head(model)[0]
    from_logits = loss_key.endswith("_logits")
    if loss_key.startswith("binary"):
        return keras.losses.BinaryCrossentropy(from_logits=from_logits)
    return keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits)


def build(data: ParityData, spec: str):
    """Call the model factory; a usage error unless it returns a Keras 3 model."""
    import keras

    model = call_user(data.model, spec)
    if not isinstance(model, keras.Model):
        raise UsageError(f"{spec}() returned a {type(model).__name__}; expected a keras.Model (Keras 3)")
    return model


def prepare(data: ParityData) -> ParityData:
    """Check a caller's Keras model and data before any training (one batch of each part through the
    model and the loss) and settle the loss and the metric."""
    import keras

    mspec, dspec = data.model_spec or "the model factory", data.data_spec or "the data factory"
    train = check_part(data.sets.train, "train", dspec, data.steps)
    test = check_part(data.sets.test, "validation", dspec)
    keras.utils.set_random_seed(0)
    model = build(data, mspec)
    classes, loss_fn = None, data.loss_fn
    for part, obj in (("train", train), ("validation", test)):
        xb, yb = first_batch(obj, data.batch_size)
        try:
            out = model(xb, training=False)
            y = np.asarray(yb)
            is_class = y.dtype.kind in "iu" and len(out.shape) == y.ndim + 1
            classes = is_class if classes is None else classes and is_class
            loss = (loss_fn or default_loss(model, is_class))(yb, out)
            value = float(np.asarray(loss))
        except Exception as exc:
            raise UsageError(f"a {part} batch of {dspec} does not fit {mspec} (checked before any training): "
                             f"{one_line(exc)}{_unbatched_hint(obj, model)}") from None
        if not np.isfinite(value):
            raise UsageError(f"the loss of {mspec} on a {part} batch of {dspec} is {value} before any training")
    metric = ("custom" if data.metric_fn is not None else "accuracy" if classes else "loss")
    known = metric == "accuracy" or (metric == "loss" and loss_fn is None)  # a constant predictor's score is known
    chance = of_targets(_targets(test), metric, bool(classes)) if known else None
    return dataclasses.replace(data, source=dataclasses.replace(data.sets, train=train, test=test),
                               loss_fn=loss_fn or default_loss(model, classes), metric=metric,
                               higher_is_better=metric != "loss", chance=chance)


def _targets(obj):
    """Every validation target as one NumPy array (a tf.data pipeline read once, to its end)."""
    if isinstance(obj, tuple):
        return np.asarray(obj[1])
    parts = [np.asarray(element[1]) for element in obj]
    return np.concatenate([p.reshape(len(p), -1) if p.ndim else p.reshape(1) for p in parts])


def _unbatched_hint(obj, model) -> str:
    """A tf.data.Dataset whose elements have the rank of one sample, not of a batch: say ``.batch(N)``
    (Keras's own message is "Exception encountered when calling Sequential.call()")."""
    if not is_dataset(obj):
        return ""
    try:
        x_spec = obj.element_spec[0]
        want = len(model.inputs[0].shape)  # (None, ...): a batch's rank
        got = len(x_spec.shape)
    except Exception:
        return ""
    return f"; its elements look unbatched (rank {got}, the model takes rank {want}): call .batch(N) on the dataset" \
        if got == want - 1 else ""
