"""Dependencies point one way (#38, #47): the command packages define the protocol and its types and
hold the flows; a backend implements operations and never calls back up into a command. And
capabilities are declared, not probed: a driver never asks ``getattr``/``hasattr`` of a backend or
its session.

The rule, with no exception list: a module under ``backends/`` imports from a command package only
its protocol modules (``ops``, ``config``, ``report``: the operations and their types), at any depth
(a function-level import counts), and never the backend registry (``ampkit.registry``: choosing a
backend is the drivers' job). What a backend needs besides is a neutral module (``ampkit.formats``,
``ampkit.words``, ``ampkit.summaries``, ``ampkit.plan_format`` ...)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
PKG = SRC / "ampkit"

COMMANDS = ("audit", "bench", "cli", "doctor", "parity", "plan", "render", "report")
FLOW_MODULES = ("driver", "runner", "loop")
PROTOCOL_MODULES = ("ops", "config", "report")
REGISTRY = "ampkit.registry"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _graph() -> dict[str, set[str]]:
    """ampkit module -> the ampkit modules it imports (any depth; ``from . import x`` is an edge to x)."""
    files = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in files)
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in files]
                deps.update(d for d in subs or [target] if d in files)
        graph[mod] = deps - {mod}
    return graph


def _command(mod: str) -> str | None:
    """The command package a module belongs to (None for a neutral module or a backend)."""
    parts = mod.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] == "ampkit" and parts[1] in COMMANDS else None


def _in_backend(mod: str) -> bool:
    return mod.startswith("ampkit.backends.")


def _climbs(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(backend module, what it may not import): a command module other than a protocol one, or the registry."""
    def forbidden(dep: str) -> bool:
        command = _command(dep)
        return dep == REGISTRY or bool(command) and (dep == f"ampkit.{command}" or dep.split(".")[-1] not in PROTOCOL_MODULES)

    return sorted((mod, dep) for mod, deps in graph.items() if _in_backend(mod) for dep in deps if forbidden(dep))


@pytest.mark.parametrize("command", ["audit", "bench", "doctor", "parity", "plan", "cli", "render", "report"])
def test_backends_import_only_the_protocol_of_a_command(command):
    found = [f"{mod} imports {dep}" for mod, dep in _climbs(_graph()) if _command(dep) == command]
    assert not found, found


def test_no_backend_imports_the_registry():
    assert not [f"{mod} imports {dep}" for mod, dep in _climbs(_graph()) if dep == REGISTRY]


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_direction_rule_sees_planted_violations(tmp_path, monkeypatch):
    """The rule can fail: a synthetic backend module that imports a driver in a function body, a
    command's helper, the command's library entry and the registry is found; its imports of the
    protocol, a type and a neutral module are not."""
    _write(tmp_path / "ampkit", {
        "__init__.py": "", "registry.py": "", "formats.py": "",
        "backends/__init__.py": "",
        "backends/base.py": "from ..bench.ops import BenchOps\n",
        "backends/fake/__init__.py": "",
        "backends/fake/bench.py": ("from ...bench.ops import BenchOps\nfrom ...bench.report import BenchRow\n"
                                   "from ...bench.config import BenchConfig\nfrom ...formats import FP16\n"
                                   "def measure():\n    from ...bench.driver import run\n"),
        "backends/fake/audit.py": "from ...bench.rows import h\nfrom ... import registry\nfrom ... import bench\n",
        "bench/__init__.py": "",
        "bench/ops.py": "", "bench/report.py": "", "bench/config.py": "", "bench/rows.py": "",
        "bench/driver.py": "",
    })
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PKG", tmp_path / "ampkit")
    assert _climbs(_graph()) == [("ampkit.backends.fake.audit", "ampkit.bench"),
                                 ("ampkit.backends.fake.audit", "ampkit.bench.rows"),
                                 ("ampkit.backends.fake.audit", "ampkit.registry"),
                                 ("ampkit.backends.fake.bench", "ampkit.bench.driver")]


# ---------------------------------------------------------------- capabilities declared, not probed
def _probes(source: str) -> list[str]:
    """``getattr``/``hasattr`` calls whose object is a backend or one of its sessions."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                and node.args):
            subject = ast.unparse(node.args[0])
            if "backend" in subject or "session" in subject:
                found.append((node.lineno, f"line {node.lineno}: {ast.unparse(node)}"))
    return [text for _, text in sorted(found)]


def _drivers() -> list[Path]:
    return sorted(p for name in COMMANDS if name != "cli" for flow in FLOW_MODULES
                  for p in [PKG / name / f"{flow}.py"] if p.exists())


def test_drivers_ask_no_getattr_or_hasattr_of_a_backend():
    assert len(_drivers()) >= 5, _drivers()
    probes = {str(p.relative_to(ROOT)): _probes(p.read_text(encoding="utf-8")) for p in _drivers()}
    assert not {k: v for k, v in probes.items() if v}, probes


def test_the_probe_check_sees_a_planted_getattr():
    planted = ("def run(config, backend, session, failed):\n"
               "    if config.strategy not in getattr(backend, 'bench_strategies', ()):\n        pass\n"
               "    fed = getattr(session, 'input', None)\n"
               "    return hasattr(signal, 'setitimer') and getattr(failed, 'outputs', None)\n")
    assert _probes(planted) == ["line 2: getattr(backend, 'bench_strategies', ())",
                                "line 4: getattr(session, 'input', None)"]


@pytest.mark.parametrize("framework,kinds", [("torch", {"plain", "fp8", "what_if"}), ("tensorflow", {"plain", "what_if"})])
def test_the_audit_session_is_chosen_in_one_table(framework, kinds):
    """Each backend's audit_sessions is the one table (kind -> session class); the kind is the
    config's, decided in one function; the sessions derive from the protocol (its declared defaults)."""
    import importlib.util

    from ampkit.audit.config import AuditConfig
    from ampkit.audit.ops import AuditSession, WhatIfSession, session_kind
    from ampkit.registry import get_backend

    if framework == "tensorflow" and importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed")
    table = get_backend(framework).audit_sessions
    assert set(table) == kinds
    # derived, not merely alike (a Protocol with data members cannot answer issubclass)
    assert all(AuditSession in cls.__mro__ for cls in table.values()) and WhatIfSession in table["what_if"].__mro__
    assert [session_kind(AuditConfig(mode=m, what_if=w)) for m, w in (("fp16", False), ("bf16", False), ("fp8", False),
                                                                       ("fp16", True))] == ["plain", "plain", "fp8", "what_if"]


def test_the_protocol_loads_at_most_twelve_ampkit_modules():
    """``import ampkit.backends.base`` loads the protocols, their packages and ``ampkit`` itself and
    nothing else (docs/architecture.md): a protocol module that imports a helper at module level for an
    annotation (``doctor.ops`` took ``rounds.Work`` so) pulls its whole floor in."""
    import subprocess

    code = "import sys, ampkit.backends.base; print(sorted(m for m in sys.modules if m.startswith('ampkit')))"
    loaded = ast.literal_eval(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert len(loaded) <= 12, loaded
    assert not [m for m in loaded if m.split(".")[-1] not in ("ops", "base", "_callable") and m.count(".") > 1], loaded
