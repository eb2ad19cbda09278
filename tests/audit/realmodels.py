"""Real third-party models built without weights, and an independent per-module relative error.

The oracle the audit is checked against: both passes in train mode, from the same weights and
buffers, with the same seed; every module output cloned when it is produced; the relative error
of a module is max over its calls and floating outputs of ||low - fp32|| / ||fp32||.
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn

from ampkit.backends.torch.numerics.hooks import float_tensors  # flattening outputs; the errors are computed here


def _pass(model, run, dtype, seed):
    outs: dict[str, list[torch.Tensor]] = {}
    handles = []
    for name, mod in model.named_modules():
        def hook(m, a, o, name=name):
            outs.setdefault(name, []).extend(t.detach().float().clone() for t in float_tensors(o))
        handles.append(mod.register_forward_hook(hook))
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
                run(model)
    finally:
        for h in handles:
            h.remove()
    return outs


def independent_rel_errors(model: nn.Module, run, dtype: torch.dtype, seed: int = 0) -> dict[str, float]:
    """Per module: max over calls/outputs of ||low - fp32|| / ||fp32|| (0 where both are zero)."""
    model.train()
    state = copy.deepcopy(model.state_dict())
    ref = _pass(model, run, None, seed)
    model.load_state_dict(state)
    low = _pass(model, run, dtype, seed)
    model.load_state_dict(state)
    errs = {}
    for name, rs in ref.items():
        worst = 0.0
        for r, a in zip(rs, low.get(name, [])):
            if r.shape != a.shape:
                continue
            d = float(torch.linalg.vector_norm(a - r))
            n = float(torch.linalg.vector_norm(r))
            worst = max(worst, d / n if n > 0 else (0.0 if d == 0 else float("inf")))
        errs[name] = worst
    return errs


def resnet18():
    import torchvision
    return torchvision.models.resnet18(weights=None, num_classes=10)


def mobilenet():
    import torchvision
    return torchvision.models.mobilenet_v3_small(weights=None, num_classes=10)


def timm_resnet():
    import timm
    return timm.create_model("resnet18", pretrained=False, num_classes=10)


def hf_bert():
    from transformers import BertConfig, BertForSequenceClassification
    cfg = BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, max_position_embeddings=64, num_labels=3)
    return BertForSequenceClassification(cfg)


def hf_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=512, n_embd=64, n_layer=2, n_head=4, n_positions=64)
    return GPT2LMHeadModel(cfg)
