"""The two backend folders have one shape (issue #38): every concept both implement has the same
sub-package and module name under ``backends/torch`` and ``backends/tensorflow``, and no function
under ``backends/tensorflow`` carries a framework suffix (``resolve_auto`` as in torch, without ``_tf``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BACKENDS = Path(__file__).resolve().parents[2] / "src" / "ampkit" / "backends"

# (concept, module path relative to each backend folder): both folders have it under this name
SHARED = [
    ("the backend object the drivers get", "backend.py"),
    ("environment section, device, mode support behind the protocol", "environment.py"),
    ("which modes run here and what auto resolves to", "devices.py"),
    ("doctor: self-tests", "doctor.py"),
    ("doctor: the kernels it times", "doctor_ops.py"),
    ("doctor: the training work it times", "doctor_work.py"),
    ("doctor: the fp8 self-test through the engine", "doctor_fp8.py"),
    ("bench: one mode's row and the probe", "bench.py"),
    ("bench --explain: the profiler's breakdown", "profile_breakdown.py"),
    ("parity: one seed's training run", "parity.py"),
    ("parity: a caller's data", "parity_data.py"),
    ("audit", "audit.py"),
    ("audit --what-if", "whatif.py"),
    ("the model and batch an audit runs on (--data)", "audit_batch.py"),
    ("the engine (ampkit.MixedPrecision / ampkit.keras.MixedPrecision)", "engine/__init__.py"),
    ("the engine's front class", "engine/mixed_precision.py"),
    ("the precision contract (mp.verify)", "engine/contract.py"),
    ("dynamic loss scaling", "engine/scaling.py"),
    ("fp8 training", "engine/fp8.py"),
    ("a precision plan on a model (keep_fp32)", "engine/islands.py"),
    ("trainer-callback side", "integrations/__init__.py"),
    ("the callbacks' pre-failure watch", "integrations/watch.py"),
    ("numerics of an audited step", "numerics/__init__.py"),
    ("where an inf/NaN is made", "numerics/origin.py"),
    ("parameter gradients of an audited step", "numerics/params.py"),
    ("the same random numbers in every pass", "numerics/replay.py"),
    ("workloads: built-in and MODULE:FACTORY", "workloads/__init__.py"),
    ("the batch a bare model is fed", "workloads/inputs.py"),
]
FRAMEWORK_PREFIXES = ("keras_", "tf_", "tensorflow_", "torch_")


def _modules(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*.py") if "__pycache__" not in p.parts}


@pytest.mark.parametrize("concept,rel", SHARED, ids=[rel for _, rel in SHARED])
def test_each_shared_concept_has_one_name_in_both_backends(concept, rel):
    missing = [name for name in ("torch", "tensorflow") if not (BACKENDS / name / rel).is_file()]
    assert not missing, f"{concept}: {rel} missing under backends/{', backends/'.join(missing)}"


def _twin_named_differently(torch_mods: set[str], tf_mods: set[str]) -> list[str]:
    """TensorFlow modules whose name is a torch module's name with a framework prefix (``keras_contract``
    for ``contract``), wherever torch keeps it: one concept, two names."""
    out = []
    for rel in sorted(tf_mods):
        leaf = rel.rpartition("/")[2]
        for prefix in FRAMEWORK_PREFIXES:
            if leaf.startswith(prefix):
                bare = leaf[len(prefix):]
                twins = [m for m in torch_mods if m.rpartition("/")[2] == bare]
                if twins:
                    out.append(f"{rel} (torch: {', '.join(sorted(twins))})")
    return out


def test_no_concept_has_a_framework_prefixed_twin():
    assert not _twin_named_differently(_modules(BACKENDS / "torch"), _modules(BACKENDS / "tensorflow"))


def test_twin_check_sees_a_planted_prefixed_module():
    assert _twin_named_differently({"engine/contract.py", "bench.py"}, {"keras_contract.py", "bench.py"}) == [
        "keras_contract.py (torch: engine/contract.py)"]


def _suffixed_functions(folder: Path) -> list[str]:
    out = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.lower().endswith("_tf"):
                out.append(f"{path.relative_to(folder).as_posix()}:{node.lineno} {node.name}")
    return out


def test_no_tensorflow_function_carries_a_framework_suffix():
    assert not _suffixed_functions(BACKENDS / "tensorflow")


def test_suffix_check_sees_a_planted_function(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "m.py").write_text("class A:\n    def run_tf(self):\n        pass\n\n\ndef ok():\n    pass\n")
    assert _suffixed_functions(tmp_path) == ["sub/m.py:2 run_tf"]
