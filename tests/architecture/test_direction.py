"""Dependencies point one way (#38): the command packages define the protocol and its types and hold
the flows; a backend implements operations and never calls back up into a flow. And capabilities
are declared, not probed: a driver never asks ``getattr``/``hasattr`` of a backend or its session.

A *flow* is a command's driver, runner or loop, the CLI, the backend registry (``ampkit.backends``:
choosing a backend is the drivers' job), or any command module that imports one of them, directly
or through others, at any depth (a function-level import counts): a command's library entry
(``ampkit.audit``) is one. Everything else in a command package is a protocol/type module
(``ops``, ``config``, ``report``) or a neutral helper, which a backend may import."""

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
#: upward imports another helper is removing in this round (#38, "lib-surface": the parity data split and
#: the library's parity entry); each entry must still be needed -- delete it when its import is gone
TEMPORARY: dict[tuple[str, str], str] = {}  # (backend module, flow it still imports): why, until it goes


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


def _command(mod: str) -> bool:
    parts = mod.split(".")
    return len(parts) >= 2 and parts[0] == "ampkit" and parts[1] in COMMANDS


def _in_backend(mod: str) -> bool:
    return mod.startswith(REGISTRY + ".") and mod != "ampkit.backends.base"


def _flows(graph: dict[str, set[str]]) -> set[str]:
    """The flow modules: the seeds, and every command module that reaches one (not through a backend)."""
    seeds = {m for m in graph if _command(m) and (m.split(".")[-1] in FLOW_MODULES or m.split(".")[1] == "cli")}
    seeds |= {REGISTRY} & set(graph)
    flows = set(seeds)
    changed = True
    while changed:
        changed = False
        for mod, deps in graph.items():
            if mod not in flows and _command(mod) and deps & flows:
                flows.add(mod)
                changed = True
    return flows


def kind(dep: str, flows: set[str]) -> str:
    """How a backend's import of a command module counts: ``protocol/type``, ``neutral helper`` or ``flow``."""
    if dep in flows:
        return "flow"
    return "protocol/type" if dep.split(".")[-1] in PROTOCOL_MODULES else "neutral helper"


def _upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(backend module, flow it imports): every import from a backend folder up into a flow."""
    flows = _flows(graph)
    return sorted((mod, dep) for mod, deps in graph.items() if _in_backend(mod)
                  for dep in deps if dep in flows)


def test_backends_import_no_driver_runner_or_flow():
    found = _upward(_graph())
    unexpected = [f"{mod} imports {dep}" for mod, dep in found if (mod, dep) not in TEMPORARY]
    assert not unexpected, unexpected
    stale = [f"{mod} -> {dep}" for mod, dep in TEMPORARY if (mod, dep) not in found]
    assert not stale, f"no longer imported, remove from TEMPORARY: {stale}"


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_direction_rule_sees_planted_violations(tmp_path, monkeypatch):
    """The rule can fail: a synthetic backend module that imports a driver, and one that imports an
    innocent-looking helper which calls a runner in a function body, are both found; its imports of
    the protocol, a type and a neutral helper are not."""
    _write(tmp_path / "ampkit", {
        "__init__.py": "",
        "backends/__init__.py": "from .base import Backend\n",
        "backends/base.py": "from ..bench.ops import BenchOps\n",
        "backends/fake/__init__.py": "",
        "backends/fake/bench.py": ("from ...bench.ops import BenchOps\nfrom ...bench.report import BenchRow\n"
                                   "from ...bench.rows import fill_timing\n\n"
                                   "def measure():\n    from ...bench.driver import run\n"),
        "backends/fake/audit.py": "from ...bench.helper import h\nfrom ...registry import get_backend\n",
        "bench/__init__.py": "",
        "bench/ops.py": "", "bench/report.py": "", "bench/rows.py": "from .report import BenchRow\n",
        "bench/driver.py": "from .runner import run_child\n",
        "bench/runner.py": "from .rows import fill_timing\n",
        "bench/helper.py": "def h():\n    from .runner import run_child\n",
    })
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PKG", tmp_path / "ampkit")
    graph = _graph()
    flows = _flows(graph)
    assert flows == {"ampkit.backends", "ampkit.bench.driver", "ampkit.bench.runner", "ampkit.bench.helper"}
    assert _upward(graph) == [("ampkit.backends.fake.audit", "ampkit.backends"),
                              ("ampkit.backends.fake.audit", "ampkit.bench.helper"),
                              ("ampkit.backends.fake.bench", "ampkit.bench.driver")]
    assert [kind(d, flows) for d in ("ampkit.bench.ops", "ampkit.bench.rows", "ampkit.bench.driver")] == [
        "protocol/type", "neutral helper", "flow"]


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
