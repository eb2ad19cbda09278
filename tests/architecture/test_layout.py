"""The tree keeps its shape: frameworks confined to their backend folders, no import cycles,
ruff clean, no binaries in git, and a TensorFlow-only machine runs every command without torch."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
PKG = SRC / "ampkit"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """Every import in a file, at any depth (function-level imports count too), and every import by
    name (``importlib.import_module("ampkit...")``, ``__import__("ampkit...")``): (absolute module,
    names imported from it)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            out.append((target, [a.name for a in node.names]))
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str) and node.args[0].value.startswith("ampkit")
              and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) in ("import_module", "__import__")):
            out.append((node.args[0].value, []))  # an import by name is an import: a cycle through it is a cycle
    return out


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        for target, names in _imports(path):
            if not target.startswith("ampkit"):
                continue
            # `from . import x` where x is a module is an edge to that module
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in files]
            for dep in subs or [target]:
                if dep in files and dep != mod:
                    graph[mod].add(dep)
    return graph


def test_no_import_cycles_among_ampkit_modules():
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_cycle_detector_sees_a_planted_cycle(tmp_path, monkeypatch):
    """The test above can fail: two-module cycles written to a scratch package are found, one through
    a function-level import and one through an import by name (``importlib.import_module``)."""
    pkg = tmp_path / "ampkit"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from .b import g\n")
    (pkg / "b.py").write_text("from ampkit.a import f\n")
    (pkg / "c.py").write_text("import importlib\n\ndef late():\n    return importlib.import_module('ampkit.d')\n")
    (pkg / "d.py").write_text("from .c import late\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PKG", pkg)
    assert _graph() == {"ampkit": set(), "ampkit.a": {"ampkit.b"}, "ampkit.b": {"ampkit.a"},
                        "ampkit.c": {"ampkit.d"}, "ampkit.d": {"ampkit.c"}}


@pytest.mark.parametrize("framework,home,modules", [
    ("torch", "ampkit.backends.torch", ("torch", "torchvision", "transformers")),
    ("tensorflow", "ampkit.backends.tensorflow", ("tensorflow", "keras", "tf_keras")),
])
def test_each_framework_is_imported_only_inside_its_backend_folder(framework, home, modules):
    # ampkit.registry chooses the framework (--framework auto tries `import torch`); ampkit.keras is
    # the public name of the Keras engine and re-exports it
    allowed_public = {"torch": {"ampkit.registry"}, "tensorflow": {"ampkit.keras"}}[framework]
    offenders = []
    for path in PKG.rglob("*.py"):
        mod = _module_name(path)
        if mod == home or mod.startswith(home + ".") or mod in allowed_public:
            continue
        for target, _ in _imports(path):
            if target.split(".")[0] in modules:
                offenders.append(f"{path.relative_to(ROOT)} imports {target}")
    assert not offenders, offenders


def _backend_of(module: str) -> str | None:
    """``torch`` for ``ampkit.backends.torch.x``; None outside a backend folder (``ampkit.backends``
    itself and its ``base`` protocol are neutral)."""
    parts = module.split(".")
    if len(parts) > 2 and parts[:2] == ["ampkit", "backends"] and (PKG / "backends" / parts[2]).is_dir():
        return parts[2]
    return None


def _cross_backend_imports(graph: dict[str, set[str]]) -> list[str]:
    return [f"{mod} imports {dep}" for mod, deps in sorted(graph.items()) for dep in sorted(deps)
            if _backend_of(mod) and _backend_of(dep) and _backend_of(mod) != _backend_of(dep)]


def test_backends_import_nothing_from_each_other():
    assert not _cross_backend_imports(_graph())


def test_cross_backend_check_sees_a_planted_import():
    assert _backend_of("ampkit.backends.torch.bench") == "torch" and _backend_of("ampkit.backends.base") is None
    graph = {"ampkit.backends.torch.bench": {"ampkit.backends.tensorflow.environment", "ampkit.bench.runner"},
             "ampkit.backends.tensorflow.environment": {"ampkit.environment"}, "ampkit.bench.runner": set()}
    assert _cross_backend_imports(graph) == ["ampkit.backends.torch.bench imports ampkit.backends.tensorflow.environment"]


#: the only neutral modules that may name a backend module: the package's lazy public names, and
#: ampkit.keras, the public name of the Keras engine, and the trainer callbacks' public names
_MAY_NAME_A_BACKEND = {"ampkit", "ampkit.keras", "ampkit.integrations.transformers", "ampkit.integrations.lightning"}


def test_commands_reach_a_backend_only_through_the_protocol():
    """The CLI, the drivers and the library entry points get a backend from ampkit.backends
    (get_backend / load_backend); none imports a backend's own modules."""
    graph = _graph()
    offenders = [f"{mod} imports {dep}" for mod, deps in sorted(graph.items()) for dep in sorted(deps)
                 if not _backend_of(mod) and _backend_of(dep) and mod not in _MAY_NAME_A_BACKEND]
    assert not offenders, offenders


MAX_MODULE_LINES = 400
MAX_ENGINE_CLASS_LINES = 300


def _long_modules(root: Path, limit: int) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > limit:
            out.append(f"{path.relative_to(root)}: {n} lines")
    return out


def test_no_module_is_over_400_lines():
    assert not _long_modules(PKG, MAX_MODULE_LINES)


def test_line_limit_sees_a_planted_long_module(tmp_path):
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    (tmp_path / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert _long_modules(tmp_path, MAX_MODULE_LINES) == [f"long.py: {MAX_MODULE_LINES + 1} lines"]


def _class_lines(root: Path, name: str) -> dict[str, int]:
    """Lines of every class ``name`` defined under ``root`` (decorators and docstring included)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.name == name:
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                found[str(path.relative_to(root))] = node.end_lineno - start + 1
    return found


def test_the_engine_front_class_is_under_300_lines():
    """ampkit.MixedPrecision is a front: scaling, distribution and schedulers live in their own parts."""
    import ampkit

    front = ampkit.MixedPrecision
    lines = _class_lines(PKG / "backends" / "torch", "MixedPrecision")
    assert lines, "no MixedPrecision class in the torch backend"
    where = Path(sys.modules[front.__module__].__file__).relative_to(PKG / "backends" / "torch")
    assert lines[str(where)] < MAX_ENGINE_CLASS_LINES, lines


def test_class_lines_counts_decorators_and_body(tmp_path):
    (tmp_path / "m.py").write_text("import dataclasses\n\n@dataclasses.dataclass\nclass MixedPrecision:\n"
                                   "    a: int = 1\n\n    def f(self):\n        return 2\n")
    assert _class_lines(tmp_path, "MixedPrecision") == {"m.py": 6}


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_each_backend_implements_every_operation_of_the_protocol(framework):
    """Every method of the typed protocol (EnvironmentOps and each command's Ops) is the backend's
    own implementation, not the protocol's empty stub (the optional ones, base.OPTIONAL, have real
    defaults); no whole-command method is left."""
    from ampkit.backends import base
    from ampkit.registry import get_backend

    if framework == "tensorflow" and importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed")
    backend = get_backend(framework)  # imports no TensorFlow: importing it here crashes torch's later tests
    assert isinstance(backend, base.Backend) and backend.name == framework
    ops = [name for proto in (base.EnvironmentOps, base.DoctorOps, base.BenchOps, base.ParityOps, base.AuditOps)
           for name, value in vars(proto).items() if callable(value) and not name.startswith("_")
           and name not in base.OPTIONAL]
    assert len(ops) >= 15, ops
    stubs = [name for name in ops if getattr(type(backend), name) is getattr(base.Backend, name, None)]
    assert not stubs, stubs
    for command in ("doctor", "bench", "parity", "audit"):  # the flow is the drivers', not a backend's
        assert not hasattr(backend, command), command


def test_ruff_is_clean():
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not os.path.exists(ruff):
        pytest.skip("ruff is not installed (pip install 'ampkit[lint]')")
    r = subprocess.run([ruff, "check", "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_no_binary_files_tracked_by_git():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    binary = []
    for name in filter(None, files):
        path = ROOT / name.decode()
        if path.suffix.lower() in (".png", ".jpg", ".jpeg", ".svg"):  # documentation images are fine
            continue
        if path.is_file() and b"\0" in path.read_bytes()[:8192]:
            binary.append(name.decode())
    assert not binary, binary


# ---------------------------------------------------------------- a machine with TensorFlow and no torch
_BLOCK_TORCH = '''"""A stand-in for a machine where torch is not installed: importing it fails."""
raise ImportError("No module named 'torch' (blocked by ampkit's TensorFlow-only test)")
'''


@pytest.mark.tensorflow
def test_tensorflow_only_machine_runs_every_command_without_torch(tmp_path):
    """torch made unimportable in every process (a stub package first on the path): --framework
    auto picks TensorFlow, the four commands run and say so, and torch never loads."""
    stub = tmp_path / "stub"
    (stub / "torch").mkdir(parents=True)
    (stub / "torch" / "__init__.py").write_text(_BLOCK_TORCH)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(stub), str(SRC), os.environ.get("PYTHONPATH", "")])}
    assert subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True).returncode != 0
    # one process runs the four commands (one TensorFlow import instead of four; bench's modes still run
    # in their own children, under the same stub): each exit code, and whether torch loaded at the end
    probe = ("import sys, json; from ampkit.cli.main import main; "
             "rcs = [main(args) for args in json.loads(sys.argv[1])]; "
             "sys.stderr.write('RCS=%s TORCH_LOADED=%s\\n' % (json.dumps(rcs), 'torch' in sys.modules))")
    runs = {
        "doctor": ["doctor", "--quick"],
        "bench": ["bench", "--workload", "mlp", "--modes", "fp32,bf16", "--steps", "2", "--warmup", "1"],
        "parity": ["parity", "--modes", "fp32", "--seeds", "1", "--epochs", "1"],
        "audit": ["audit", "--workload", "mlp", "--mode", "bf16"],
    }
    cases = [[*args, "--device", "cpu", "--json", str(tmp_path / f"{command}.json")] for command, args in runs.items()]
    r = subprocess.run([sys.executable, "-c", probe, json.dumps(cases)], env=env, capture_output=True, text=True,
                       timeout=900, cwd=tmp_path)
    assert "RCS=[0, 0, 0, 0] TORCH_LOADED=False" in r.stderr, r.stderr[-3000:]
    for command in runs:
        doc = json.loads((tmp_path / f"{command}.json").read_text())
        assert doc["framework"] == "tensorflow" and doc["environment"]["framework"] == "tensorflow", command
        if command == "bench":
            assert [row["status"] for row in doc["results"]] == ["ok", "ok"], doc["results"]
