"""The presenters moved (issue #47); what they show did not: every face of every command's golden
document -- the report page, the notebook HTML and repr, the console table, to_pandas, the CSV --
equals the one captured from the code before the move (tests/render/golden_views.py)."""

from __future__ import annotations

import golden_views as gv
import pytest

pytest.importorskip("jinja2")
pytest.importorskip("matplotlib")
pytest.importorskip("pandas")

CASES = [(name, face) for name in gv.names() for face in sorted(p.name[len(name) + 1:] for p in gv.HERE.glob(f"{name}.*")
                                                                    if not p.name.endswith(f"{name}.json"))]


@pytest.fixture(scope="module")
def shown():
    return {}


@pytest.mark.parametrize("name,face", CASES, ids=[f"{n}.{f}" for n, f in CASES])
def test_each_face_of_each_document_is_the_golden_one(name, face, shown):
    if name not in shown:
        shown[name] = gv.faces(name)
    assert shown[name][face] == (gv.HERE / f"{name}.{face}").read_text()


def test_every_document_on_one_page_is_the_golden_page():
    assert gv.all_page() == (gv.HERE / "all.page.html").read_text()


def test_the_goldens_cover_every_command_and_face():
    faces = {p.name.split(".", 1)[1] for p in gv.HERE.iterdir()}
    assert {"page.html", "notebook.html", "console.txt", "pandas.json", "repr.txt", "csv.txt"} <= faces
    assert {n.split(".")[0] for n in gv.DOCUMENTS} >= {"bench", "audit", "whatif", "auditfp8", "parity", "doctor", "plan"}
