"""A user's ``MODULE:FACTORY`` for PyTorch: what it returns, turned into a Workload."""

from __future__ import annotations

import torch.nn as nn

from ....errors import UsageError
from ....factory import call_factory
from .base import Workload, classification_batches
from .inputs import input_embedding, model_classes, token_batches


def build_user_workload(spec: str, input_shape: tuple[int, ...] | None, num_classes: int | None = None,
                        fed=None) -> Workload:
    """What ``spec``'s factory returns as a Workload. ``fed(obj) -> Workload``: the model fed the
    user's data instead (``--data``, :mod:`ampkit.backends.torch.data_batch`): no --input-shape then."""
    obj = call_factory(spec)
    model = obj.model if isinstance(obj, Workload) else obj
    if isinstance(model, nn.Module) and any(t.is_meta for t in (*model.parameters(), *model.buffers())):
        raise UsageError(f"{spec}() returned a model with tensors on the meta device (shapes, no data); "
                         "materialize it in the factory: model.to_empty(device='cpu'), then initialize its weights")
    if fed is not None:
        return fed(obj)
    if isinstance(obj, Workload):
        if obj.name == "custom":
            obj.name = spec
        return obj
    if isinstance(obj, nn.Module):
        check_one_input(obj, spec)
        if input_shape is None:
            raise UsageError(f"{spec} returned a bare model: give --input-shape (per sample, without the "
                             "batch dimension, e.g. 3,32,32) and optionally --num-classes")
        classes = num_classes or model_classes(obj) or 10
        embedding = input_embedding(obj)
        if embedding is not None:  # token ids from the embedding's vocabulary, not N(0,1) floats
            name, emb = embedding
            vocab = emb.num_embeddings
            return Workload(obj, token_batches(input_shape, classes, vocab), name=spec,
                            input={"kind": "token_ids", "range": [0, vocab], "from": f"{name}.num_embeddings"})
        return Workload(obj, classification_batches(input_shape, classes), name=spec, input={"kind": "normal(0,1)"})
    raise UsageError(f"{spec}() returned a {type(obj).__name__}; expected an ampkit.Workload or a torch.nn.Module")


def forward_inputs(model: nn.Module) -> list[str]:
    """The inputs ``model.forward`` requires (no default, not ``*args``/``**kwargs``); [] when it
    cannot be read."""
    import inspect

    try:
        sig = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in sig.parameters.values() if p.kind in kinds and p.default is inspect.Parameter.empty]


def check_one_input(model: nn.Module, spec: str) -> None:
    """A bare model is fed one input tensor: one whose forward needs more is told how to say what it takes."""
    needs = forward_inputs(model)
    if len(needs) > 1:
        name = type(model).__name__
        feed = ", ".join(f"{n}(n, gen)" for n in needs)
        raise UsageError(
            f"{spec} returned {name}, whose forward needs {len(needs)} inputs ({', '.join(needs)}); a bare model is fed "
            f"one tensor: return an ampkit.Workload that makes its batches instead -- "
            f"def build(): return ampkit.Workload(model={name}(), make_batch=lambda n, device, gen: "
            f"(({feed}), targets(n, gen)), loss_fn=my_loss)  (inputs as a tuple or a dict, each on device; "
            "see docs/your-model.md)")
