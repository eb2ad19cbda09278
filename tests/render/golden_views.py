"""Every face of every command's document, as text: the report page (HTML and Markdown), the notebook
HTML and ``repr``, the console table, ``to_pandas`` and the CSV. ``tests/render/test_goldens.py``
holds them against the goldens captured from the code before the presenters moved (issue #47):
the same documents give the same content.

Run as a script to (re)write the goldens: ``python tests/render/golden_views.py`` (only when a face
is meant to change; say so in the commit)."""

from __future__ import annotations

import datetime as dt
import io
import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent / "goldens"
#: the documents, written by real small CPU runs (tiny sizes): name -> what produced it
DOCUMENTS = {
    "bench": "ampkit bench --device cpu --workload mlp --modes fp32,bf16 --steps 3 --warmup 1 --explain",
    "audit": "ampkit audit --device cpu --workload mlp --loss-scale 1e18",
    "whatif": "ampkit audit --device cpu --workload mlp --what-if",
    "auditfp8": "ampkit audit --device cpu --workload mlp --mode fp8",
    "parity": "ampkit parity --device cpu --seeds 2 --epochs 1",
    "doctor": "ampkit doctor --quick --device cpu",
    "doctorall": "ampkit doctor --quick --device cpu --framework all",
    "plan": "ampkit plan --device cpu --workload mlp --modes bf16 --steps 3 --warmup 1",
}
NOW = dt.datetime(2026, 1, 2, 3, 4, tzinfo=dt.timezone.utc)
_NB_ID = re.compile(r"\bnb\d+-")
#: a notebook chart's SVG ids hash its chart id, whose serial counts the charts this process drew before
#: (the notebook tests, run first in the same worker, moved every hash): the hash goes with the serial
_NB_HASH = re.compile(r"\bnb\d+-(\w+)-([a-z])[0-9a-f]{10}\b")


def _notebook(html: str) -> str:
    return _NB_ID.sub("nbN-", _NB_HASH.sub(r"nbN-\1-\2#", html))


def _console(render, report) -> str:
    from rich.console import Console

    con = Console(file=io.StringIO(), width=140, record=True, color_system=None, highlight=False)
    render(report, con)
    return con.export_text()


def _frame(frame) -> str:
    return frame.to_json(orient="records", indent=1, default_handler=str)


def record():
    """A trainer callback's record (the notebook test's): a failure at step 5 in fp16."""
    from ampkit.integrations.record import StepRow, TrainRecord

    rec = TrainRecord(source="test", trainer="trainer 1.0", k=3)
    rec.set_modules([("a", "Linear"), ("b", "ReLU"), ("c", "Linear")], ["a", "c"])
    rec.scaler, rec.mode = True, "fp16"
    for step in range(1, 5):
        rec.add(StepRow(step, 0.5, [1.0, 2.0, 3.0], [0.1, 0.1], 8.0, 8.0, False))
    rec.add(StepRow(5, float("nan"), [1.0, float("inf"), float("nan")], [float("nan")] * 2, 8.0, 4.0, True))
    return rec


def faces(name: str) -> dict[str, str]:
    """The faces of one golden document (or of the callbacks' record, ``name="record"``)."""
    import ampkit.report as rp

    out: dict[str, str] = {}
    if name == "record":
        result = record()
        out["notebook.html"] = _notebook(result._repr_html_())
        out["repr.txt"] = repr(result)
        out["pandas.json"] = _frame(result.to_pandas())
        return out
    path = str(HERE / f"{name}.json")
    docs = rp.load(path)
    page = rp.build(docs, now=NOW)
    out["page.html"] = rp.html(page).replace(path, f"{name}.json")
    out["page.md"] = rp.markdown(page).replace(path, f"{name}.json")
    command = docs[0].command
    result = docs[0].report
    if name == "doctorall":
        from ampkit.doctor.report import DoctorSet

        result = DoctorSet.from_dict(json.loads(Path(path).read_text()))
    out["notebook.html"] = _notebook(result._repr_html_())
    out["repr.txt"] = repr(result)
    out["pandas.json"] = _frame(result.to_pandas())
    if command == "parity":
        out["pandas_seed.json"] = _frame(result.to_pandas(per="seed"))
    out["console.txt"] = console(command, result)
    if command == "bench":
        from ampkit.render import bench

        csv = HERE.parent / "_golden.csv"
        bench.to_csv(result, str(csv))
        out["csv.txt"] = csv.read_text()
        csv.unlink()
    return out


def console(command: str, result) -> str:
    if command == "doctor":
        from ampkit.cli.doctor import _render

        return _console(_render, result)
    import importlib

    return _console(importlib.import_module(f"ampkit.render.{command}").render, result)


def all_page() -> str:
    """One page of every document: the environments grouped, doctor vs bench reconciled."""
    import ampkit.report as rp

    paths = [str(HERE / f"{n}.json") for n in DOCUMENTS]
    html = rp.html(rp.build(rp.load_all(paths), now=NOW))
    for p in paths:
        html = html.replace(p, Path(p).name)
    return html


def names() -> list[str]:
    return [*DOCUMENTS, "record"]


if __name__ == "__main__":
    for n in names():
        for face, text in faces(n).items():
            (HERE / f"{n}.{face}").write_text(text)
    (HERE / "all.page.html").write_text(all_page())
    print("written", len(list(HERE.iterdir())))
