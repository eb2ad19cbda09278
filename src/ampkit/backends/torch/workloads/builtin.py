"""Built-in workloads: CPU-sized (mlp, cnn) and the zoo (resnet50, vit_b_16, bert-base, gpt2)."""

from __future__ import annotations

import importlib.util

import torch
import torch.nn as nn

from ....errors import UsageError
from .base import Workload, classification_batches, output_loss

MODELS_EXTRA = "pip install 'ampkit[models]'"

BUILTIN = {
    "mlp": "MLP 784-1024-1024-10 on random MNIST-sized inputs (CPU-sized)",
    "cnn": "small CNN (3 conv layers, 16-32-64 channels) on random 3x32x32 images (CPU-sized; --image-size)",
    "resnet50": "torchvision ResNet-50, random weights, 3x224x224 images, 1000 classes (--image-size)",
    "vit_b_16": "torchvision ViT-B/16, random weights, 3x224x224 images, 1000 classes (--image-size)",
    "bert-base": "transformers BERT-base masked-LM step, random weights, sequence 128 (--seq-len)",
    "gpt2": "transformers GPT-2 (124M) causal-LM step, random weights, sequence 512 (--seq-len)",
}


def default_workload(device: torch.device) -> str:
    return "resnet50" if device.type == "cuda" else "mlp"


def _need(module: str, workload: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise UsageError(f"workload {workload!r} needs {module}, part of the models extra: {MODELS_EXTRA}")


def _mlp() -> Workload:
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(),
                          nn.Linear(1024, 10))
    return Workload(model, classification_batches((784,), 10), name="mlp", batch_size=64, lr=1e-4)


def _cnn(image_size: int = 32) -> Workload:
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
    )
    return Workload(model, classification_batches((3, image_size, image_size), 10), name="cnn", batch_size=32, lr=1e-4)


def _torchvision(name: str, image_size: int = 224) -> Workload:
    _need("torchvision", name)
    import torchvision

    extra = {"image_size": image_size} if name.startswith("vit") else {}  # ViT's position embeddings follow it
    model = getattr(torchvision.models, name)(weights=None, **extra)
    return Workload(model, classification_batches((3, image_size, image_size), 1000), name=name,
                    batch_size=64 if name == "resnet50" else 32, lr=1e-4)


def _token_batches(vocab: int, seq: int, *, mlm: bool):
    def make_batch(batch_size: int, device: torch.device, generator: torch.Generator):
        ids = torch.randint(0, vocab, (batch_size, seq), generator=generator)
        if mlm:  # 15% of tokens masked, loss only on them (BERT's recipe; [MASK] is id 103)
            mask = torch.rand((batch_size, seq), generator=generator) < 0.15
            if not mask.any():  # a short sequence may draw no mask: keep one token, so the loss is defined
                mask[0, 0] = True
            labels = torch.where(mask, ids, torch.full_like(ids, -100))
            ids = torch.where(mask, torch.full_like(ids, 103), ids)
        else:
            labels = ids.clone()
        inputs = {"input_ids": ids.to(device), "labels": labels.to(device)}
        return inputs, None

    return make_batch


def _bert(seq_len: int = 128) -> Workload:
    _need("transformers", "bert-base")
    from transformers import BertConfig, BertForMaskedLM

    # the defaults are BERT-base: 12 layers, hidden 768, 12 heads, 512 positions (more when asked)
    cfg = BertConfig(max_position_embeddings=max(512, seq_len))
    model = BertForMaskedLM(cfg)
    return Workload(model, _token_batches(cfg.vocab_size, seq_len, mlm=True), loss_fn=output_loss,
                    name="bert-base", batch_size=32, lr=1e-4)


def _gpt2(seq_len: int = 512) -> Workload:
    _need("transformers", "gpt2")
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_positions=max(1024, seq_len))  # the defaults are GPT-2 small (124M), 1024 positions
    model = GPT2LMHeadModel(cfg)
    return Workload(model, _token_batches(cfg.vocab_size, seq_len, mlm=False), loss_fn=output_loss,
                    name="gpt2", batch_size=8, lr=1e-4)


_FACTORIES = {"mlp": _mlp, "cnn": _cnn, "resnet50": lambda **kw: _torchvision("resnet50", **kw),
              "vit_b_16": lambda **kw: _torchvision("vit_b_16", **kw), "bert-base": _bert, "gpt2": _gpt2}


def check_builtin(name: str) -> str:
    key = name.strip().lower().replace("_", "-") if name else name
    aliases = {"vit-b-16": "vit_b_16", "bert": "bert-base", "bert-base": "bert-base"}
    key = aliases.get(key, key)
    if key not in _FACTORIES:
        from ....suggest import did_you_mean

        raise UsageError(f"unknown workload {name!r}; {did_you_mean(name, BUILTIN)}built-in workloads: {', '.join(BUILTIN)} "
                         "(or --model MODULE:FACTORY for your own)")
    if key in ("resnet50", "vit_b_16"):
        _need("torchvision", key)
    if key in ("bert-base", "gpt2"):
        _need("transformers", key)
    return key


def build_builtin(name: str, *, seq_len: int | None = None, image_size: int | None = None) -> Workload:
    """A built-in workload; ``seq_len``/``image_size`` resize the ones that take them (checked by
    :func:`ampkit.workload_sizes.size_kwargs`: a size a workload does not take is a UsageError)."""
    from ....workload_sizes import size_kwargs

    key = check_builtin(name)
    return _FACTORIES[key](**size_kwargs("torch", key, None, seq_len, image_size))
