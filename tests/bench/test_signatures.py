"""Issue 20: the library functions show their real parameters (help, inspect.signature), not
``(*args, **kwargs)``, and stay in step with the backends they call."""

from __future__ import annotations

import inspect
import pydoc

import pytest

import ampkit


@pytest.mark.parametrize("name, first", [("parity", "make_model"), ("audit", "model_or_workload"),
                                         ("bench", "workload")])
def test_help_and_signature_show_the_parameters(name, first):
    obj = getattr(ampkit, name)
    sig = inspect.signature(obj)
    assert next(iter(sig.parameters)) == first
    assert not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in sig.parameters.values())
    text = pydoc.render_doc(obj, renderer=pydoc.plaintext)
    assert f"{name}({first}" in text and "*args, **kwargs" not in text
    func = getattr(obj, name)
    assert func.__doc__ and "Args:" in func.__doc__ and "Returns:" in func.__doc__


@pytest.mark.parametrize("public, backend, lazy_defaults", [
    ("audit", "ampkit.backends.torch.audit", {"loss_fn"}),
])
def test_library_signature_matches_the_backend(public, backend, lazy_defaults):
    """Same parameter names, kinds and defaults as the PyTorch function it calls (the defaults that
    are torch functions are None here, so ``import ampkit`` needs no torch)."""
    import importlib

    pytest.importorskip("torch")
    mine = inspect.signature(getattr(ampkit, public)).parameters
    theirs = inspect.signature(getattr(importlib.import_module(backend), public)).parameters
    assert list(mine) == list(theirs)
    for name, p in theirs.items():
        assert mine[name].kind == p.kind, name
        if name in lazy_defaults:
            assert mine[name].default is None
        else:
            assert mine[name].default == p.default, name


@pytest.mark.parametrize("name", ["parity", "bench"])
def test_the_framework_is_the_models_by_default_and_torch_defaults_stay_lazy(name):
    """Issue 38: one library surface -- ``framework="auto"`` (the model's); parity's torch defaults
    (cross-entropy, accuracy) are None here, chosen by the backend (``import ampkit`` needs no torch)."""
    params = inspect.signature(getattr(ampkit, name)).parameters
    assert params["framework"].default == "auto"
    if name == "parity":
        assert params["loss_fn"].default is None and params["metric_fn"].default is None


def test_bench_signature_covers_the_config():
    from ampkit.bench.config import BenchConfig

    params = set(inspect.signature(ampkit.bench).parameters)
    internal = {"seed", "search_cap", "batch_size_hint", "auto_mode", "auto_reason"}
    assert set(BenchConfig.__dataclass_fields__) - internal <= params
