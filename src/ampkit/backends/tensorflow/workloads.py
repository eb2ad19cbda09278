"""Keras workloads: built inside the active dtype policy, last layer kept in float32.

Built-in workloads are Keras 3; a ``--model MODULE:FACTORY`` may return a Keras 3 or a Keras 2
(``tf_keras``) model, and ``KerasWorkload.flavor`` says which (see :mod:`.flavor`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...errors import UsageError
from .flavor import Flavor, flavor_of, keras3

TF_WORKLOADS = ("mlp", "cnn", "resnet50", "bert-base")


@dataclass
class KerasWorkload:
    model: object                      # keras.Model or tf_keras.Model
    make_batch: Callable[[int, int], tuple]   # (batch_size, seed) -> (x, y) numpy arrays
    loss: object = "sparse_categorical_crossentropy_logits"
    name: str = "custom"
    batch_size: int = 32
    lr: float = 1e-4

    @property
    def flavor(self) -> Flavor:
        """The Keras the model was built with."""
        return flavor_of(self.model) or keras3()

    def keras_loss(self):
        """The loss, from the model's own Keras (each Keras compiles only its own loss objects)."""
        if self.loss == "sparse_categorical_crossentropy_logits":
            return self.flavor.sparse_ce_logits()
        return self.loss


def _classification(shape, classes):
    def make(n, seed):
        rng = np.random.default_rng(seed)
        return rng.standard_normal((n, *shape)).astype("float32"), rng.integers(0, classes, n)
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

    return KerasWorkload(keras.Model(ids, out), make, name="bert-base", batch_size=32)


_BUILTIN = {"mlp": _mlp, "cnn": _cnn, "resnet50": _resnet50, "bert-base": _bert_base}
#: --seq-len / --image-size for the built-ins that take them (checked by ampkit.bench.sizes), for callers
#: that cannot pass ``sizes`` (the audit's child sets them here)
DEFAULT_SIZES: dict = {}


def check_tf_workload(name: str) -> str:
    key = (name or "").strip().lower()
    key = {"bert": "bert-base"}.get(key, key)
    if key not in _BUILTIN:
        raise UsageError(f"unknown workload {name!r} for --framework tensorflow; built-in: {', '.join(TF_WORKLOADS)} "
                         "(or --model MODULE:FACTORY returning a keras.Model or tf_keras.Model)")
    return key


def build_tf_workload(workload: str | None, model_spec: str | None, input_shape, num_classes: int,
                      sizes: dict | None = None) -> KerasWorkload:
    """Call inside the mode's policy scope: layers take the global dtype policy when built.

    A factory may build with Keras 3 or tf_keras: call :func:`.flavor.load_every_keras` before
    entering the scope, so that the scope sets the policy in both.
    """
    if model_spec:
        from ...factory import call_factory

        obj = call_factory(model_spec)
        if isinstance(obj, KerasWorkload):
            return obj
        flavor = flavor_of(obj)
        if flavor is None or not flavor.is_model(obj):
            raise UsageError(f"{model_spec}() returned a {type(obj).__name__}; expected a keras.Model (Keras 3) "
                             "or a tf_keras.Model (Keras 2)")
        if input_shape is None:
            raise UsageError(f"{model_spec} returned a bare model: give --input-shape (per sample) and --num-classes")
        return KerasWorkload(obj, _classification(tuple(input_shape), num_classes), name=model_spec)
    kw = dict(DEFAULT_SIZES if sizes is None else sizes)  # {"seq_len": n} or {"image_size": n}
    if "seq_len" in kw:
        kw["seq"] = kw.pop("seq_len")
    return _BUILTIN[check_tf_workload(workload)](**kw)


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
