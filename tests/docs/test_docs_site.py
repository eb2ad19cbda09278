"""The documentation site (docs/, mkdocs.yml) builds in strict mode, offline, and its architecture
page names only paths that exist and every package there is; the README is the short door."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "src" / "ampkit"
README = ROOT / "README.md"
ARCH = ROOT / "docs" / "architecture.md"


def test_mkdocs_build_strict(tmp_path):
    """Every page in the nav, no broken link or anchor, the API pages from the docstrings, the
    notebook rendered (not executed), docs/_pending/ left out. Run from a scratch folder: the
    notebook plugin writes its cache into the working folder."""
    pending = ROOT / "docs" / "_pending"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(tmp_path / "site")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    site = tmp_path / "site"
    for page in ("commands/doctor", "commands/bench", "commands/parity", "commands/audit", "commands/report",
                 "integrations/transformers", "integrations/lightning", "integrations/keras", "architecture",
                 "notebooks/getting-started"):
        assert (site / page / "index.html").is_file(), page
    api = (site / "api" / "engine" / "index.html").read_text(encoding="utf-8")
    assert "accumulation_steps" in api and "load_state_dict" in api  # rendered from MixedPrecision's docstrings
    notebook = (site / "notebooks" / "getting-started" / "index.html").read_text(encoding="utf-8")
    assert "ampkit.bench" in notebook
    if pending.is_dir():
        for md in pending.glob("*.md"):
            assert not (site / "_pending" / md.stem).exists(), md


def _named_paths(text: str) -> list[str]:
    """The backticked words of a page that look like paths in the tree (a slash, or a .py/.md/.sh
    file); placeholders and globs (<, *, {, ...) are not paths."""
    out = []
    for token in re.findall(r"`([^`\s]+)`", text):
        if any(c in token for c in "<>*{}$") or "..." in token or token.startswith(("-", "http")):
            continue
        if "/" in token or re.search(r"\.(py|md|sh|toml|yml|ipynb)$", token):
            out.append(token)
    return out


def _resolve(token: str) -> Path | None:
    for base in (ROOT, ROOT / "src", PKG):
        p = base / token.rstrip("/")
        if p.exists():
            return p.resolve()
    return None


def _beside(token: str, text: str) -> bool:
    """A bare file name (``ops.py``) that exists in a folder the same table row or paragraph names
    ("each package's `ops.py`" beside `src/ampkit/audit/`)."""
    if "/" in token:
        return False
    blocks = [b for b in re.split(r"\n\s*\n", text) for b in (b.splitlines() if b.lstrip().startswith("|") else [b])]
    for line in blocks:
        if f"`{token}`" not in line:
            continue
        folders = [p for t in _named_paths(line) if (p := _resolve(t)) is not None and p.is_dir()]
        if not any((folder / token).exists() for folder in folders):
            return False
    return True


def _dotted_names(text: str) -> set[str]:
    """The packages a page names by their dotted name: `ampkit.backends.torch`, and the sub-packages a
    parent introduces in the same breath -- `ampkit.backends.torch` (and its `engine`, `numerics`)."""
    names = set(re.findall(r"`(ampkit(?:\.\w+)*)`", text))
    for parent, tail in re.findall(r"`(ampkit(?:\.\w+)*)`\s*\(([^)]*)\)", text):
        names.update(f"{parent}.{leaf}" for leaf in re.findall(r"`(\w+)`", tail))
    return names


def _package_named(pkg: Path, resolved: set, dotted: set[str]) -> bool:
    name = ".".join(pkg.relative_to(ROOT / "src").parts)
    return pkg in resolved or name in dotted


def test_architecture_names_existing_paths_and_every_package():
    text = ARCH.read_text(encoding="utf-8")
    named = _named_paths(text)
    assert len(named) >= 10, named
    missing = [t for t in named if _resolve(t) is None and not _beside(t, text)]
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"
    resolved, dotted = {_resolve(t) for t in named}, _dotted_names(text)
    packages = sorted(p.parent.resolve() for p in PKG.rglob("__init__.py"))
    unnamed = [str(p.relative_to(ROOT)) for p in packages if not _package_named(p, resolved, dotted)]
    assert not unnamed, f"docs/architecture.md does not name these packages: {unnamed}"


def test_architecture_check_sees_a_missing_path():
    dotted = _dotted_names("`ampkit.backends.torch` (and its `engine`, `workloads`), `ampkit.cli`")
    assert dotted == {"ampkit.backends.torch", "ampkit.backends.torch.engine", "ampkit.backends.torch.workloads",
                      "ampkit.cli"}
    assert not _package_named(PKG / "render", set(), dotted) and _package_named(PKG / "cli", set(), dotted)
    assert _beside("ops.py", "`src/ampkit/bench/` has `ops.py`") and not _beside("nope.py", "`src/ampkit/bench/` `nope.py`")
    assert _resolve("src/ampkit/keras_engine.py") is None and _resolve("src/ampkit/backends/torch/engine/") is not None
    assert _named_paths("`src/ampkit/x.py` and `--flag` and `a/<b>.py` and `ampkit/cli/`") == ["src/ampkit/x.py", "ampkit/cli/"]


def test_readme_is_short_and_opens_with_the_two_commands():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, len(lines)
    fences = [i for i, line in enumerate(lines) if line.startswith("```")]
    first = [line for line in lines[fences[0] + 1:fences[1]] if line.strip()]
    assert len(first) == 2, first
    assert "pip install -q -e '.[torch,models,data]'" in first[0] and "ampkit doctor" in first[0]
    assert "pip install -q -e '.[test]'" in first[1] and "pytest" in first[1]
    # .ci/run reads the test command exactly so
    ci = subprocess.run(["bash", "-c", "awk '/^```/{n++; next} n==1 && NF {print}' README.md | sed -n 2p"],
                        cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    assert ci == first[1]


def test_readme_links_point_into_the_tree():
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#\s]+)", text)
    assert links
    missing = [link for link in links if not link.startswith("http") and not (ROOT / link).exists()]
    assert not missing, missing
