"""Keras workloads: built inside the active dtype policy, last layer kept in float32."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ....errors import UsageError
from ..flavor import Flavor, flavor_of, keras3
from .inputs import input_plan, make_inputs

TF_WORKLOADS = ("mlp", "cnn", "resnet50", "bert-base")


#: the losses a workload may name, as (Keras loss class, from_logits)
LOSSES = {
    "sparse_categorical_crossentropy_logits": ("SparseCategoricalCrossentropy", True),
    "sparse_categorical_crossentropy": ("SparseCategoricalCrossentropy", False),   # after a softmax
    "binary_crossentropy_logits": ("BinaryCrossentropy", True),                    # one linear output
    "binary_crossentropy": ("BinaryCrossentropy", False),                          # after a sigmoid
}

#: classes of a bare model whose output does not declare them, when --num-classes is not given
DEFAULT_NUM_CLASSES = 10


@dataclass
class KerasWorkload:
    model: object                      # keras.Model or tf_keras.Model
    make_batch: Callable[[int, int], tuple]   # (batch_size, seed) -> (x, y) numpy arrays
    loss: object = "sparse_categorical_crossentropy_logits"   # a LOSSES key, or a loss object
    name: str = "custom"
    batch_size: int = 32
    lr: float = 1e-4
    input_shape: tuple | None = None   # per sample (a bare model: given or read from the model)
    num_classes: int | None = None
    input: dict | None = None          # what make_batch feeds (.inputs.input_plan; None: N(0, 1))

    @property
    def flavor(self) -> Flavor:
        """The Keras the model was built with."""
        return flavor_of(self.model) or keras3()

    @property
    def from_logits(self) -> bool | None:
        """Whether the loss takes logits (None: a loss object ampkit did not choose)."""
        return LOSSES[self.loss][1] if isinstance(self.loss, str) and self.loss in LOSSES else None

    def keras_loss(self):
        """The loss, from the model's own Keras (each Keras compiles only its own loss objects)."""
        if isinstance(self.loss, str) and self.loss in LOSSES:
            cls, logits = LOSSES[self.loss]
            return getattr(self.flavor.module.losses, cls)(from_logits=logits)
        return self.loss


def _classification(shape, classes, target_shape=(), loss="sparse_categorical_crossentropy_logits",
                    one_unit=False, plan=None):
    """Standard-normal inputs (or as ``plan`` says: :func:`.inputs.make_inputs`) and targets for
    ``loss``: class indices in ``[0, classes)`` of shape ``(n, *target_shape)``; for binary cross-entropy
    0/1 (``one_unit``: one output) or one-hot floats (multi-label sigmoid outputs)."""
    def make(n, seed):
        rng = np.random.default_rng(seed)
        x = make_inputs(plan, rng, n, shape) if plan else rng.standard_normal((n, *shape)).astype("float32")
        if loss.startswith("binary"):
            if one_unit:  # one output unit: a 0/1 target of the output's shape
                return x, rng.integers(0, 2, (n, *target_shape, 1)).astype("float32")
            idx = rng.integers(0, classes, (n, *target_shape))
            return x, np.eye(classes, dtype="float32")[idx]
        return x, rng.integers(0, classes, (n, *target_shape))
    return make


def _mlp():
    import keras

    inputs = keras.Input((784,))
    h = keras.layers.Dense(1024, activation="gelu")(inputs)
    h = keras.layers.Dense(1024, activation="gelu")(h)
    out = keras.layers.Dense(10, dtype="float32", name="logits")(h)
    return KerasWorkload(keras.Model(inputs, out), _classification((784,), 10), name="mlp", batch_size=64)


def _cnn(image_size: int = 32):
    import keras

    inputs = keras.Input((image_size, image_size, 3))
    h = inputs
    for i, ch in enumerate((16, 32, 64)):
        h = keras.layers.Conv2D(ch, 3, padding="same")(h)
        h = keras.layers.BatchNormalization()(h)
        h = keras.layers.ReLU()(h)
        if i:
            h = keras.layers.MaxPooling2D()(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    out = keras.layers.Dense(10, dtype="float32", name="logits")(h)
    return KerasWorkload(keras.Model(inputs, out), _classification((image_size, image_size, 3), 10), name="cnn", batch_size=32)


def _resnet50(image_size: int = 224):
    import keras

    base = keras.applications.ResNet50(weights=None, include_top=False, input_shape=(image_size, image_size, 3), pooling="avg")
    out = keras.layers.Dense(1000, dtype="float32", name="logits")(base.output)
    return KerasWorkload(keras.Model(base.input, out), _classification((image_size, image_size, 3), 1000), name="resnet50",
                         batch_size=64)


def _bert_base(seq: int = 128, vocab: int = 30522, hidden: int = 768, layers: int = 12, heads: int = 12,
               ffn: int = 3072):
    """A Keras encoder with BERT-base sizes and a masked-LM head (random weights)."""
    import keras

    ids = keras.Input((seq,), dtype="int32")
    pos = keras.ops.arange(seq)
    h = keras.layers.Embedding(vocab, hidden)(ids) + keras.layers.Embedding(seq, hidden)(pos)
    h = keras.layers.LayerNormalization(epsilon=1e-12)(h)
    for _ in range(layers):
        a = keras.layers.MultiHeadAttention(heads, hidden // heads)(h, h)
        h = keras.layers.LayerNormalization(epsilon=1e-12)(h + a)
        f = keras.layers.Dense(ffn, activation="gelu")(h)
        f = keras.layers.Dense(hidden)(f)
        h = keras.layers.LayerNormalization(epsilon=1e-12)(h + f)
    out = keras.layers.Dense(vocab, dtype="float32", name="mlm_logits")(h)

    def make(n, seed):
        rng = np.random.default_rng(seed)
        x = rng.integers(0, vocab, (n, seq)).astype("int32")
        return x, rng.integers(0, vocab, (n, seq))

    return KerasWorkload(keras.Model(ids, out), make, name="bert-base", batch_size=32,
                         input={"kind": "token_ids", "range": [0, vocab - 1], "why": "uniform valid token ids"})


_BUILTIN = {"mlp": _mlp, "cnn": _cnn, "resnet50": _resnet50, "bert-base": _bert_base}


def check_builtin(name: str) -> str:
    key = (name or "").strip().lower()
    key = {"bert": "bert-base"}.get(key, key)
    if key not in _BUILTIN:
        from ....suggest import did_you_mean

        raise UsageError(f"unknown workload {name!r} for --framework tensorflow; {did_you_mean(name, TF_WORKLOADS)}"
                         f"built-in: {', '.join(TF_WORKLOADS)} "
                         "(or --model MODULE:FACTORY returning a keras.Model or tf_keras.Model)")
    return key


def build_workload(workload: str | None, model_spec: str | None, input_shape, num_classes: int,
                      sizes: dict | None = None) -> KerasWorkload:
    """Call inside the mode's policy scope: layers take the global dtype policy when built.

    A factory may build with Keras 3 or tf_keras: call :func:`..flavor.load_every_keras` before
    entering the scope, so that the scope sets the policy in both.
    """
    if model_spec:
        from ....factory import call_factory

        obj = call_factory(model_spec)
        if isinstance(obj, KerasWorkload):
            return obj
        flavor = flavor_of(obj)
        if flavor is None or not flavor.is_model(obj):
            raise UsageError(f"{model_spec}() returned a {type(obj).__name__}; expected a keras.Model (Keras 3) "
                             "or a tf_keras.Model (Keras 2)")
        return bare_model_workload(obj, model_spec, input_shape, num_classes)
    kw = dict(sizes or {})  # {"seq_len": n} or {"image_size": n}
    if "seq_len" in kw:
        kw["seq"] = kw.pop("seq_len")
    return _BUILTIN[check_builtin(workload)](**kw)


# --- what a bare model declares -----------------------------------------------------------------


def _shape_str(shape) -> str:
    return ",".join("?" if d is None else str(d) for d in shape)


def declared_input_shape(model) -> tuple | None:
    """The model's per-sample input shape (``model.input_shape`` without the batch dimension, ``None``
    for an undefined dimension), or None when it has no single declared input (an unbuilt Sequential,
    several inputs)."""
    try:
        shape = model.input_shape
    except (AttributeError, ValueError, RuntimeError):
        return None
    if not isinstance(shape, (tuple, list)) or not shape or isinstance(shape[0], (tuple, list)):
        return None
    return tuple(None if d is None else int(d) for d in shape[1:])


def resolve_input_shape(model, given, model_spec: str) -> tuple:
    """The per-sample input shape to feed: ``given`` (--input-shape) when compatible with what the
    model declares, else the declared one; a usage error when they contradict or neither is known."""
    declared = declared_input_shape(model)
    given = tuple(int(d) for d in given) if given else None
    if given is not None:
        if declared is not None and (len(declared) != len(given)
                                     or any(d is not None and d != g for d, g in zip(declared, given))):
            raise UsageError(f"--input-shape {_shape_str(given)} contradicts the input shape {model_spec} declares "
                             f"({_shape_str(declared)} per sample): drop --input-shape or make it match")
        return given
    if declared is not None and declared and all(d is not None for d in declared):
        return declared
    what = f"declares its input shape only as {_shape_str(declared)}" if declared else "declares no input shape"
    raise UsageError(f"{model_spec} returned a bare model that {what}: give --input-shape (per sample, "
                     "e.g. --input-shape 32,32,3) and --num-classes")


def _producer(tensor):
    """The layer (tf_keras) or operation (Keras 3) that produced a symbolic tensor, or None."""
    history = getattr(tensor, "_keras_history", None)
    return history[0] if history else None


def _activation_name(op) -> str | None:
    """"softmax", "sigmoid", "linear", ... for the last step of a model's output; None when unknown."""
    for _ in range(8):  # a nested model's output comes from its own last operation
        if op is None:
            return None
        kind = type(op).__name__.lower()
        if kind in ("softmax", "sigmoid"):
            return kind
        act = getattr(op, "activation", None)
        if act is not None and not isinstance(act, str):
            name = getattr(act, "__name__", None) or type(act).__name__
            return name.lower()
        if isinstance(act, str):
            return act.lower()
        outputs = getattr(op, "outputs", None)
        if outputs and len(outputs) == 1 and op is not _producer(outputs[0]):
            op = _producer(outputs[0])
            continue
        return None
    return None


def _probe_output(model, input_shape) -> np.ndarray | None:
    """The model's output on a small standard-normal batch (inference mode), None when it fails
    (the bench's probe training step then says what is wrong with the model)."""
    x = np.random.default_rng(0).standard_normal((2, *input_shape)).astype("float32")
    try:
        out = model(x, training=False)
        if isinstance(out, (list, tuple)):
            out = out[0]
        return np.asarray(out, dtype="float64")
    except Exception:
        return None


def _looks_like(out: np.ndarray | None) -> str:
    """"softmax" (outputs in [0, 1], each row summing to 1), "sigmoid" (in [0, 1]) or "linear"."""
    if out is None or not out.size or not np.isfinite(out).all() or out.min() < 0 or out.max() > 1:
        return "linear"
    if out.ndim >= 2 and out.shape[-1] > 1 and np.allclose(out.sum(-1), 1.0, atol=1e-2):
        return "softmax"
    return "sigmoid"


def _output_shape(model) -> tuple | None:
    try:
        outputs = model.outputs
    except (AttributeError, ValueError, RuntimeError):  # an unbuilt Sequential
        return None
    if not outputs or len(outputs) != 1:
        return None
    return tuple(outputs[0].shape)


def model_head(model, input_shape=None) -> tuple[str, int | None, tuple]:
    """What a classifier's output says about its loss: ``(loss, classes, target_shape)``.

    ``loss`` is a :data:`LOSSES` key: a final softmax (activation, Softmax layer, or outputs in [0, 1]
    summing to 1 when ``input_shape`` lets a small batch be run) -> cross-entropy on probabilities; a
    sigmoid -> binary cross-entropy; anything else -> cross-entropy on logits (binary for one output).
    ``classes`` is the output's last dimension (None when undefined); ``target_shape`` the output's
    dimensions between batch and classes (a sequence model's positions).
    """
    shape = _output_shape(model)
    act = _activation_name(_producer(model.outputs[0])) if shape is not None else None
    if act is None and input_shape is not None:  # e.g. a Lambda, or an unbuilt Sequential: look at what it outputs
        out = _probe_output(model, input_shape)
        act = _looks_like(out)
        if shape is None and out is not None:
            shape = (None, *out.shape[1:])
    shape = shape or ()
    classes = int(shape[-1]) if len(shape) >= 2 and shape[-1] is not None else None
    middle = shape[1:-1] if len(shape) >= 2 else ()
    target_shape = tuple(int(d) for d in middle) if all(d is not None for d in middle) else ()
    if act == "softmax":
        return "sparse_categorical_crossentropy", classes, target_shape
    if act == "sigmoid":  # one unit: 2 classes; several: multi-label, as many classes as units
        return "binary_crossentropy", (2 if classes == 1 else classes), target_shape
    if classes == 1:  # one logit: binary
        return "binary_crossentropy_logits", 2, target_shape
    return "sparse_categorical_crossentropy_logits", classes, target_shape


def bare_model_workload(model, model_spec: str, input_shape=None, num_classes: int | None = None) -> KerasWorkload:
    """A workload for a bare Keras model: input shape, classes and loss from the model itself, the
    flags where it does not say (an explicit flag that contradicts it is a usage error)."""
    shape = resolve_input_shape(model, input_shape, model_spec)
    loss, classes, target_shape = model_head(model, shape)
    out = _output_shape(model)
    one_unit = bool(out) and out[-1] == 1
    if classes is None:
        classes = num_classes or DEFAULT_NUM_CLASSES
    elif num_classes not in (None, classes) and not (one_unit and num_classes == 1):
        raise UsageError(f"--num-classes {num_classes} contradicts {model_spec}, whose output has "
                         f"{1 if one_unit else classes} unit(s) ({_loss_words(loss)}, {classes} classes): "
                         "drop --num-classes or make it match")
    plan = input_plan(model)
    return KerasWorkload(model, _classification(shape, classes, target_shape, loss, one_unit, plan), loss=loss,
                         name=model_spec, input_shape=shape, num_classes=classes, input=plan)


def _loss_words(loss: str) -> str:
    cls, logits = LOSSES[loss]
    return f"{cls}(from_logits={logits})"


def _mha_flops(layer) -> float:
    """Forward FLOPs per sample of MultiHeadAttention: four projections, QK^T and AV."""
    inputs = layer.input if isinstance(layer.input, (list, tuple)) else [layer.input]
    q_shape = inputs[0].shape
    v_shape = inputs[1].shape if len(inputs) > 1 else q_shape
    tq, d = float(q_shape[1]), float(q_shape[-1])
    tv, dv_in = float(v_shape[1]), float(v_shape[-1])
    h, dk = float(layer.num_heads), float(layer.key_dim)
    dv = float(layer.value_dim or layer.key_dim)
    projections = tq * d * h * dk + tv * dv_in * h * dk + tv * dv_in * h * dv + tq * h * dv * d
    attention = h * tq * tv * dk + h * tq * tv * dv
    return 2.0 * (projections + attention)


def count_flops(model) -> float | None:
    """Training FLOPs per sample (3x forward) of Dense, EinsumDense, Conv2D and attention layers."""
    total = 0.0
    try:
        for layer in all_layers(model):
            kind = type(layer).__name__
            if kind == "MultiHeadAttention" and layer.built:
                total += _mha_flops(layer)
            elif kind == "Dense" and layer.built:
                positions = float(np.prod(layer.output.shape[1:-1])) if hasattr(layer, "output") and len(layer.output.shape) > 2 else 1.0
                total += 2.0 * float(np.prod(layer.kernel.shape)) * positions
            elif kind == "EinsumDense" and layer.built:
                out = layer.output.shape if hasattr(layer, "output") else None
                positions = float(np.prod(out[1:])) / float(layer.kernel.shape[-1]) if out is not None else 1.0
                total += 2.0 * float(np.prod(layer.kernel.shape)) * max(1.0, positions)
            elif kind == "Conv2D" and layer.built:
                out = layer.output.shape
                total += 2.0 * float(np.prod(layer.kernel.shape)) * float(out[1] * out[2])
    except Exception:
        return None
    return 3.0 * total if total else None


def all_layers(model):
    """Layers of a model, nested models flattened (attention layers are counted whole)."""
    for layer in model.layers:
        if hasattr(layer, "layers") and layer.layers:
            yield from all_layers(layer)
        else:
            yield layer
