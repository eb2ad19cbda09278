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


def test_the_audit_takes_the_models_framework_and_torch_defaults_stay_lazy():
    """Issue 38: the backends' forwarding functions are gone (torch's audit(), the Keras audit_keras):
    ``ampkit.audit`` is the one entry, ``framework="auto"`` (the model's); its torch default
    (cross-entropy) is None here, chosen by the backend (``import ampkit`` needs no torch)."""
    params = inspect.signature(ampkit.audit).parameters
    assert params["framework"].default == "auto" and params["loss_fn"].default is None
    assert list(params)[-2:] == ["framework", "name"]


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
