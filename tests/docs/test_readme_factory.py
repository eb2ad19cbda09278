"""The README's "your own model" block works as written: its factory file, copied out of the
README into an empty folder, runs through the four command lines that follow it (CPU, the few
steps the README itself gives)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _blocks(text: str) -> list[tuple[str, str]]:
    return re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M)


def readme_factory() -> tuple[str, str, list[str]]:
    """(file name, its source, the command lines) of the README's own-model block."""
    blocks = _blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    for i, (lang, body) in enumerate(blocks):
        first = body.splitlines()[0]
        if lang == "python" and re.fullmatch(r"# \w+\.py", first):
            lines = [line for line in blocks[i + 1][1].splitlines() if line.strip()]
            return first[2:], body, lines
    raise AssertionError("README.md has no factory file block (a python block opening with '# NAME.py')")


def test_the_readme_block_is_found_and_names_its_file():
    name, source, lines = readme_factory()
    module = name.removesuffix(".py")
    assert 'if __name__ == "__main__":' in source
    assert [line.split()[1] for line in lines] == ["doctor", "bench", "parity", "audit"]
    assert all(f"{module}:" in line for line in lines[1:]), lines


@pytest.mark.slow
def test_the_readme_factory_runs_through_doctor_bench_parity_audit(tmp_path):
    name, source, lines = readme_factory()
    (tmp_path / name).write_text(source, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "AMPKIT_CACHE_DIR": str(tmp_path / "cache"),
           "CUDA_VISIBLE_DEVICES": ""}
    for line in lines:
        argv = shlex.split(line)
        assert argv[0] == "ampkit", line
        proc = subprocess.run([sys.executable, "-m", "ampkit", *argv[1:], "--json", str(tmp_path / f"{argv[1]}.json")],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-3000:]}"
    import json

    bench = json.loads((tmp_path / "bench.json").read_text())
    assert {r["mode"] for r in bench["results"]} == {"fp32", "bf16"}
    parity = json.loads((tmp_path / "parity.json").read_text())
    assert parity["command"] == "parity"
    audit = json.loads((tmp_path / "audit.json").read_text())
    assert audit["input"]["kind"] == "data"
