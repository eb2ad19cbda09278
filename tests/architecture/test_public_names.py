"""The names users may import (#47 point 4), as torch's test_public_bindings.py keeps its own: the
README's and the contract's, module by module. Every module not listed here is internal: its names
may change without notice (docs/architecture.md says so). A public module's ``__all__`` is exactly its
list, so a new public name is a decision written here, and every listed name imports."""

from __future__ import annotations

import importlib
import importlib.util

import pytest

PUBLIC = {
    "ampkit": ["__version__", "MODES", "TRAINING_MODES", "Precision", "get_precision", "parse_mode", "UsageError",
               "ModeUnavailableError", "AutocastDisabledError", "LossScaleWarning", "MixedPrecision", "StepResult",
               "Workload", "verify", "audit", "bench", "doctor", "parity"],
    "ampkit.audit": ["AuditConfig", "AuditReport", "Finding", "LayerStats", "audit"],
    "ampkit.bench": ["BenchReport", "BenchRow", "bench"],
    "ampkit.doctor": ["DoctorConfig", "DoctorReport", "ModeReport", "run_doctor"],
    "ampkit.parity": ["Arrays", "DataSets", "ParityConfig", "ParityData", "ParityReport", "ParityResult", "RunRecord",
                      "parity"],
    "ampkit.plan": ["KIND", "VERSION", "MODULE_MODES", "Plan", "load_plan", "pattern_matches", "propose_plan"],
    "ampkit.report": ["Document", "Report", "build", "html", "load", "load_all", "markdown"],
    "ampkit.keras": ["MixedPrecision", "LossScaleHistory", "float32_output", "loss_scale_of", "GlobalPolicyFound",
                     "LossScaleWarning"],
    "ampkit.integrations.transformers": ["AmpkitCallback"],
    "ampkit.integrations.lightning": ["AmpkitCallback"],
}
#: what a public module needs installed (the rest import with the base install)
NEEDS = {"ampkit.keras": "keras", "ampkit.integrations.transformers": "transformers",
         "ampkit.integrations.lightning": "lightning"}
#: public names reached as attributes (the contract's and the README's spellings)
ATTRIBUTES = ["ampkit.MixedPrecision.from_plan", "ampkit.MixedPrecision.verify", "ampkit.keras.MixedPrecision.verify",
              "ampkit.keras.MixedPrecision.from_plan"]


def test_ampkit_verify_is_the_contract_check_the_readme_names():
    """First in the file: before any test here imports Keras into this process."""
    pytest.importorskip("torch")
    import ampkit
    from ampkit.backends.torch.engine.contract import verify_torch

    assert ampkit.verify is verify_torch
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(2, 2)
    assert ampkit.verify(model, torch.optim.SGD(model.parameters(), 0.1), compute_dtype=torch.bfloat16) == []


def _needs(module: str) -> None:
    package = NEEDS.get(module)
    if package and importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed")


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_a_public_module_declares_exactly_its_public_names(module):
    _needs(module)
    mod = importlib.import_module(module)
    assert sorted(mod.__all__) == sorted(PUBLIC[module])


@pytest.mark.parametrize("module,name", [(m, n) for m, names in sorted(PUBLIC.items()) for n in names])
def test_every_public_name_imports(module, name):
    _needs(module)
    if module == "ampkit" and name in ("MixedPrecision", "StepResult", "Workload", "verify"):
        pytest.importorskip("torch")
    assert getattr(importlib.import_module(module), name) is not None


@pytest.mark.parametrize("path", ATTRIBUTES)
def test_every_public_attribute_resolves(path):
    root, *rest = path.split(".MixedPrecision")
    _needs(root)
    pytest.importorskip("torch" if root == "ampkit" else "keras")
    obj = importlib.import_module(root).MixedPrecision
    for part in rest[0].strip(".").split("."):
        obj = getattr(obj, part)
    assert callable(obj)


def test_the_list_sees_an_undeclared_name(monkeypatch):
    import ampkit.bench

    monkeypatch.setattr(ampkit.bench, "__all__", [*ampkit.bench.__all__, "secret"])
    with pytest.raises(AssertionError):
        test_a_public_module_declares_exactly_its_public_names("ampkit.bench")
