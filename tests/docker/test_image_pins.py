"""The build's Python guard (docker/check-python.py), the dependency layer (docker/requirements.py)
and the bound docker/lock.sh records: fast, no Docker daemon.

The guard is what stops a build on a base whose Python the pins refuse (issue 25: soupsieve 4.1.3
needs Python >= 3.11.5, Debian bookworm has 3.11.2, and pip failed or backtracked for minutes
instead of saying so).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
pytestmark = pytest.mark.images
tomllib = pytest.importorskip("tomllib", reason="docker/requirements.py runs on the images' Python 3.11")


def load(name: str):
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), DOCKER / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


check_python = load("check-python")
requirements = load("requirements")


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_lock_records_the_lowest_python_every_pin_accepts(framework):
    text = (DOCKER / f"constraints-{framework}.txt").read_text()
    m = check_python.HEADER.search(text)
    assert m, "docker/lock.sh writes a '# requires-python: >=X.Y.Z (...)' header"
    bound = tuple(int(m.group(i)) for i in (1, 2, 3))
    assert bound[:2] == (3, 11)  # the bases' minor version
    # the pin named as the reason is one of the pins of this very file
    named = re.findall(r"([A-Za-z0-9_.\-]+==[0-9A-Za-z.+!\-]+) \(Requires-Python", m.group(4))
    pins = {ln.strip() for ln in text.splitlines() if ln and not ln.startswith("#")}
    if bound > (3, 11, 0):
        assert named and set(named) <= pins, (named, m.group(4))


def test_guard_names_the_pin_when_the_base_python_is_too_old():
    text = (DOCKER / "constraints-torch.txt").read_text()
    rc, msg = check_python.check(text, "docker/constraints-torch.txt", (3, 11, 2), "/usr/bin/python3")
    assert rc == 1
    # bookworm's 3.11.2: the message says which pin needs what
    assert "needs Python >=3.11.5, set by soupsieve==4.1.3" in msg and "3.11.2 (/usr/bin/python3)" in msg
    assert check_python.check(text, "c.txt", (3, 11, 5), "py")[0] == 0
    assert check_python.check(text, "c.txt", (3, 11, 7), "py")[0] == 0


def test_guard_refuses_another_minor_version_and_a_file_without_the_header():
    text = "# requires-python: >=3.11.5 (lowest ...; set by: soupsieve==4.1.3 (Requires-Python >=3.11.5))\nsix==1.0\n"
    rc, msg = check_python.check(text, "c.txt", (3, 12, 9), "py")
    assert rc == 1 and "resolved for CPython 3.11" in msg and "3.12.9" in msg
    rc, msg = check_python.check("six==1.0\n", "c.txt", (3, 11, 9), "py")
    assert rc == 2 and "docker/lock.sh" in msg


def test_guard_as_the_build_runs_it(tmp_path):
    """The command line the Dockerfile runs: exit 0 on this interpreter or exit 1 with one line."""
    r = subprocess.run([sys.executable, str(DOCKER / "check-python.py"), str(DOCKER / "constraints-torch.txt"),
                        "docker/constraints-torch.txt"], capture_output=True, text=True, timeout=30)
    fits = sys.version_info[:2] == (3, 11) and sys.version_info >= (3, 11, 5)
    assert r.returncode == (0 if fits else 1), r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    bad = tmp_path / "c.txt"
    bad.write_text("# requires-python: >=3.11.99 (x; set by: fake==1 (Requires-Python >=3.11.99))\n")
    r = subprocess.run([sys.executable, str(DOCKER / "check-python.py"), str(bad)], capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "set by fake==1" in r.stderr
    r = subprocess.run([sys.executable, str(DOCKER / "check-python.py"), str(tmp_path / "missing")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "cannot read" in r.stderr


@pytest.mark.parametrize("framework, extras", [("torch", "torch,models,data,images"),
                                               ("tensorflow", "tensorflow,data,images")])
def test_dependency_layer_installs_what_the_extras_need(framework, extras):
    """requirements.py lists exactly the requirements of ampkit[extras] (self-references followed),
    and every one of them is pinned by the framework's constraints file."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = requirements.requirements(project, extras.split(","))
    assert not any(r.lower().startswith("ampkit") for r in reqs)
    names = {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower().replace("_", "-") for r in reqs}
    assert set(project["dependencies"]) <= set(reqs)
    assert framework in names and "jupyterlab" in names
    pins = {ln.split("==")[0].lower().replace("_", "-") for ln in (DOCKER / f"constraints-{framework}.txt").read_text().splitlines()
            if ln and not ln.startswith("#")}
    assert names <= pins, names - pins
    with pytest.raises(SystemExit, match="no extra 'nope'"):
        requirements.requirements(project, ["nope"])


def test_dockerfile_guards_before_installing_and_splits_the_layers():
    text = (DOCKER / "Dockerfile").read_text()
    guard = text.index("check-python.py constraints.txt")
    deps = text.index("--requirement requirements.txt")
    src = text.index("COPY src ./src")
    assert guard < deps < src < text.index('".[${AMPKIT_EXTRAS}]"')
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert "!docker/check-python.py" in ignore and "!docker/requirements.py" in ignore


def test_image_test_script_usage():
    script = DOCKER / "test-images.sh"
    r = subprocess.run(["bash", str(script), "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "--break entrypoint-exits|ssh-passwords" in r.stdout
    r = subprocess.run(["bash", str(script), "--only", "jax"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--only torch|tensorflow" in r.stderr
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
