"""The batch a bare model is fed: what its input layer takes, said in words for the documents."""

from __future__ import annotations

import torch
import torch.nn as nn

from ..numerics.hooks import tensors_in


def input_embedding(model: nn.Module) -> tuple[str, nn.Embedding] | None:
    """``(name, embedding)`` the model's input goes into, or None: HuggingFace's
    ``get_input_embeddings()``, else the model's first leaf module when it is an ``nn.Embedding``."""
    emb = None
    get = getattr(model, "get_input_embeddings", None)
    if callable(get):
        try:
            emb = get()
        except Exception:  # a model that declares no input embeddings (NotImplementedError)
            emb = None
    if not isinstance(emb, nn.Embedding):
        emb = next((m for m in model.modules() if not any(True for _ in m.children())), None)
    if not isinstance(emb, nn.Embedding):
        return None
    return next(n for n, m in model.named_modules() if m is emb), emb


def model_classes(model: nn.Module) -> int | None:
    """The classes a HuggingFace sequence classifier declares (``config.num_labels``), else None."""
    config = getattr(model, "config", None)
    if type(model).__name__.endswith("ForSequenceClassification") and isinstance(getattr(config, "num_labels", None), int):
        return config.num_labels
    return None


def token_batches(input_shape: tuple[int, ...], num_classes: int, vocab: int):
    """A make_batch for a model taking token ids: ids uniform in [0, vocab), integer class targets."""
    shape = tuple(int(d) for d in input_shape)

    def make_batch(batch_size: int, device: torch.device, generator: torch.Generator):
        x = torch.randint(0, vocab, (batch_size, *shape), generator=generator)
        y = torch.randint(0, num_classes, (batch_size,), generator=generator)
        return x.to(device), y.to(device)

    return make_batch


def input_description(inputs, kind: str, **extra) -> dict:
    """``{"kind", "dtype", "shape", "min", "max", ...}`` of a batch's inputs (its first tensor; a dict
    of inputs by key): what the audit was fed, for its document. Reads the values (a host sync)."""
    doc = {"kind": kind, **extra}
    parts = inputs if isinstance(inputs, dict) else {"": inputs}
    for key, value in parts.items():
        ts = tensors_in(value)
        if not ts:
            continue
        t = ts[0]
        desc = {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}
        if t.numel() and not t.is_complex():
            desc.update(min=float(t.min()), max=float(t.max()))
        if key:
            doc.setdefault("inputs", {})[key] = desc
        else:
            doc.update(desc)
    return doc
