"""One presenter per command (#47): every module of :data:`ampkit.render.PRESENTERS` defines the same
functions (:data:`ampkit.render.FUNCTIONS`), and what reads a command's look (the report page, the
notebook display, ``to_pandas``) finds it there and nowhere else."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ampkit import render

PKG = Path(render.__file__).resolve().parents[1]
COMMANDS = ("doctor", "bench", "parity", "audit", "plan", "callback")


def test_every_command_has_a_presenter_module_under_render():
    assert set(render.PRESENTERS) == set(COMMANDS)
    assert all((PKG / "render" / f"{command}.py").is_file() for command in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_each_presenter_defines_the_same_functions(command):
    presenter = render.PRESENTERS[command]
    missing = [name for name in render.FUNCTIONS if not callable(getattr(presenter, name, None))]
    assert not missing, f"render/{command}.py lacks {missing}"


def test_the_function_check_sees_a_presenter_without_one(monkeypatch):
    monkeypatch.delattr(render.PRESENTERS["plan"], "headline")
    assert not callable(getattr(render.PRESENTERS["plan"], "headline", None))


def _command_branches(path: Path) -> list[str]:
    """Comparisons of a value with a command's name (``command == "doctor"``, ``kind in ("bench", ...)``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            names = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
            if any(n in COMMANDS for n in names):
                found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
    return found


def test_display_and_the_report_page_have_no_branch_on_a_command_name():
    files = [PKG / "display.py", PKG / "render" / "notebook.py", *sorted((PKG / "report").glob("*.py"))]
    assert not [b for f in files for b in _command_branches(f)]


def test_the_branch_check_sees_a_planted_one(tmp_path):
    (tmp_path / "m.py").write_text("def f(command):\n    if command == 'doctor':\n        return 1\n")
    assert _command_branches(tmp_path / "m.py") == ["m.py:2 command == 'doctor'"]


def test_result_classes_import_no_presenter():
    """The result classes (``*/report.py``, the callbacks' record) reach a presenter through the mixin's
    registry only, at display time: no module of theirs imports ``ampkit.render``."""
    offenders = []
    for path in [*(PKG / c / "report.py" for c in COMMANDS if c != "callback"), PKG / "integrations" / "record.py", PKG / "display.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("render", "ampkit.render")):
                if path.name != "display.py" or node.col_offset == 0:  # the mixin asks at display time only
                    offenders.append(f"{path.relative_to(PKG)}:{node.lineno}")
    assert not offenders


def test_a_doctor_that_recommends_nothing_has_a_one_line_repr_with_the_reasons_head():
    """A --quick doctor with nothing cached: its reason is two sentences (words.NOT_MEASURED); the repr
    keeps its first clause, one line under 200 characters, and the report keeps all of it (the
    getting-started notebook's quick doctor read 300 characters when it ran before any doctor had)."""
    from dataclasses import replace

    from ampkit.words import NOT_MEASURED
    from neutral_reports import doctor

    quick = replace(doctor("torch"), recommended=None, reason=NOT_MEASURED, quick=True)
    text = repr(quick)
    assert "\n" not in text and len(text) < 200, text
    assert text.startswith("<ampkit doctor torch on cuda:0: recommended none (not measured); "), text
    assert quick.reason == NOT_MEASURED
