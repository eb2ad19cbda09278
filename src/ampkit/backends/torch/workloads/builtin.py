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
    "cnn": "small CNN (3 conv layers, 16-32-64 channels) on random 3x32x32 images (CPU-sized)",
    "resnet50": "torchvision ResNet-50, random weights, 3x224x224 images, 1000 classes",
    "vit_b_16": "torchvision ViT-B/16, random weights, 3x224x224 images, 1000 classes",
    "bert-base": "transformers BERT-base masked-LM step, random weights, sequence 128",
    "gpt2": "transformers GPT-2 (124M) causal-LM step, random weights, sequence 512",
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


def _cnn() -> Workload:
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
    )
    return Workload(model, classification_batches((3, 32, 32), 10), name="cnn", batch_size=32, lr=1e-4)


def _torchvision(name: str) -> Workload:
    _need("torchvision", name)
    import torchvision

    model = getattr(torchvision.models, name)(weights=None)
    return Workload(model, classification_batches((3, 224, 224), 1000), name=name,
                    batch_size=64 if name == "resnet50" else 32, lr=1e-4)


def _token_batches(vocab: int, seq: int, *, mlm: bool):
    def make_batch(batch_size: int, device: torch.device, generator: torch.Generator):
        ids = torch.randint(0, vocab, (batch_size, seq), generator=generator)
        if mlm:  # 15% of tokens masked, loss only on them (BERT's recipe; [MASK] is id 103)
            mask = torch.rand((batch_size, seq), generator=generator) < 0.15
            labels = torch.where(mask, ids, torch.full_like(ids, -100))
            ids = torch.where(mask, torch.full_like(ids, 103), ids)
        else:
            labels = ids.clone()
        inputs = {"input_ids": ids.to(device), "labels": labels.to(device)}
        return inputs, None

    return make_batch


def _bert() -> Workload:
    _need("transformers", "bert-base")
    from transformers import BertConfig, BertForMaskedLM

    cfg = BertConfig()  # the defaults are BERT-base: 12 layers, hidden 768, 12 heads
    model = BertForMaskedLM(cfg)
    return Workload(model, _token_batches(cfg.vocab_size, 128, mlm=True), loss_fn=output_loss,
                    name="bert-base", batch_size=32, lr=1e-4)


def _gpt2() -> Workload:
    _need("transformers", "gpt2")
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config()  # the defaults are GPT-2 small (124M)
    model = GPT2LMHeadModel(cfg)
    return Workload(model, _token_batches(cfg.vocab_size, 512, mlm=False), loss_fn=output_loss,
                    name="gpt2", batch_size=8, lr=1e-4)


_FACTORIES = {"mlp": _mlp, "cnn": _cnn, "resnet50": lambda: _torchvision("resnet50"),
              "vit_b_16": lambda: _torchvision("vit_b_16"), "bert-base": _bert, "gpt2": _gpt2}


def check_builtin(name: str) -> str:
    key = name.strip().lower().replace("_", "-") if name else name
    aliases = {"vit-b-16": "vit_b_16", "bert": "bert-base", "bert-base": "bert-base"}
    key = aliases.get(key, key)
    if key not in _FACTORIES:
        raise UsageError(f"unknown workload {name!r}; built-in workloads: {', '.join(BUILTIN)} "
                         "(or --model MODULE:FACTORY for your own)")
    if key in ("resnet50", "vit_b_16"):
        _need("torchvision", key)
    if key in ("bert-base", "gpt2"):
        _need("transformers", key)
    return key


def build_builtin(name: str) -> Workload:
    return _FACTORIES[check_builtin(name)]()
