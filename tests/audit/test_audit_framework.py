"""``framework="auto"`` in the library is the model's framework (``ampkit.backends.model_framework``),
read from where its classes are defined, with nothing imported: a torch module or Workload is torch,
a Keras model (on any Keras backend) is tensorflow, a builder function is told by its batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ampkit
from ampkit.errors import UsageError
from ampkit.registry import model_framework


def _made_in(*modules):
    """An object whose class (and its bases) are defined in ``modules``, as a framework's would be."""
    bases = tuple(type(f"Base{i}", (), {"__module__": m}) for i, m in enumerate(modules[1:]))
    return type("Model", bases or (object,), {"__module__": modules[0]})()


def test_a_model_object_names_its_framework():
    assert model_framework(torch.nn.Linear(2, 2)) == "torch"
    assert model_framework(ampkit.Workload(torch.nn.Linear(2, 2), lambda *a: None)) == "torch"
    assert model_framework(_made_in("keras.src.models.sequential")) == "tensorflow"
    assert model_framework(_made_in("tf_keras.src.engine.sequential")) == "tensorflow"
    # Keras 3 on Keras's torch backend: a torch.nn.Module too, but a Keras model (ampkit's Keras engine audits it)
    assert model_framework(_made_in("keras.src.models.functional", "torch.nn.modules.module")) == "tensorflow"


def test_a_builder_is_told_by_its_batch_and_a_named_framework_wins():
    def build():
        return None

    assert model_framework(build, (np.zeros((2, 3), "float32"), np.zeros(2))) == "tensorflow"
    assert model_framework(build, ([torch.zeros(2, 3)], torch.zeros(2))) == "torch"
    assert model_framework(build) == "torch"  # nothing to tell by: auto's choice (torch is installed here)
    assert model_framework(build, ([torch.zeros(2, 3)], torch.zeros(2)), framework="keras") == "tensorflow"
    with pytest.raises(UsageError, match="framework='tensorflow' runs tensorflow models; received a torch model .Linear."):
        ampkit.audit(torch.nn.Linear(2, 2), (torch.zeros(2, 2), torch.zeros(2)), framework="keras")
    with pytest.raises(UsageError, match="unknown framework 'jax'"):
        model_framework(build, framework="jax")


def test_a_plan_for_a_keras_model_is_one_line_before_anything_loads():
    with pytest.raises(UsageError, match="plan= is PyTorch-only in the audit; received a tensorflow model"):
        ampkit.audit(_made_in("keras.src.models.sequential"), (np.zeros((2, 3)), np.zeros(2)), plan={"default": "bf16"})
