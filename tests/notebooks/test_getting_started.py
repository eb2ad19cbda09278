"""The getting-started notebook and ampkit's displays as a user sees them: executed top to bottom in
a fresh Jupyter kernel (nbclient, AMPKIT_NOTEBOOK_QUICK=1), no error output; each result displays
its table and chart; a 30-step bench is one progress display; the executed notebook exported to
HTML (nbconvert) shows the bench table and chart in headless Chromium."""

from __future__ import annotations

import importlib.util
import os
import re

import pytest

import chromium

# nbformat (through jsonschema's format checkers) takes seconds to import: imported by the tests that
# use it, not at collection, where every xdist worker would pay it for a file only one of them runs
_MISSING = [name for name in ("nbformat", "nbclient", "ipykernel") if importlib.util.find_spec(name) is None]
pytestmark = pytest.mark.skipif(bool(_MISSING), reason=f"needs {', '.join(_MISSING)}")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "src")
NOTEBOOK = os.path.join(ROOT, "examples", "notebooks", "getting-started.ipynb")
#: lines TensorFlow's C++ runtime writes to the process's stderr (absl logging), which the kernel
#: passes on: not ampkit's output, and not a Python warning or traceback
NATIVE_LOG = re.compile(r"^([IWE]\d{4} [\d:. ]+\d+ \S+:\d+\]|WARNING: All log messages before absl|\s+when |$)")


def execute(nb, cwd, monkeypatch, **env):
    """Run every cell in a fresh kernel (it inherits this process's environment) in ``cwd``."""
    import nbclient
    monkeypatch.setenv("PYTHONPATH", SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    client = nbclient.NotebookClient(nb, timeout=900, kernel_name="python3", allow_errors=True,
                                     resources={"metadata": {"path": str(cwd)}})
    client.execute()
    return nb


def problems(nb) -> list[str]:
    """Every error output and every line on stderr that is not TensorFlow's native log."""
    out = []
    for i, cell in enumerate(nb.cells):
        for o in cell.get("outputs", []):
            if o.output_type == "error":
                out.append(f"cell {i}: {o.ename}: {o.evalue}")
            elif o.output_type == "stream" and o.name == "stderr":
                out += [f"cell {i} stderr: {line}" for line in o.text.splitlines() if not NATIVE_LOG.match(line)]
    return out


def cell(nb, text: str):
    return next(c for c in nb.cells if c.cell_type == "code" and text in c.source)


def html_outputs(c) -> list[str]:
    return [o.data["text/html"] for o in c.outputs if "text/html" in o.get("data", {})]


def result_html(c, command: str) -> str:
    return next(h for h in html_outputs(c) if f'data-ampkit="{command}"' in h)


def pngs(c) -> list[str]:
    """The cell's image/png outputs (the charts: shown in an untrusted notebook too)."""
    return [o.data["image/png"] for o in c.outputs if "image/png" in o.get("data", {})]


def plain_results(c) -> list[str]:
    return [o.data["text/plain"] for o in c.outputs if o.output_type in ("execute_result", "display_data")
            and "text/plain" in o.get("data", {}) and o.data["text/plain"].startswith("<ampkit ")]


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The notebook run once as a PyTorch image runs it (the TensorFlow run is its own test)."""
    import nbformat
    mp = pytest.MonkeyPatch()
    cwd = tmp_path_factory.mktemp("notebook")
    try:
        nb = execute(nbformat.read(NOTEBOOK, as_version=4), cwd, mp, AMPKIT_NOTEBOOK_QUICK="1",
                     AMPKIT_NOTEBOOK_FRAMEWORKS="torch")
    finally:
        mp.undo()
    nbformat.write(nb, str(cwd / "executed.ipynb"))
    return nb, cwd


@pytest.mark.slow
def test_the_notebook_runs_top_to_bottom_without_error_output(executed):
    nb, cwd = executed
    assert problems(nb) == []
    assert all(c.outputs for c in nb.cells if c.cell_type == "code" and "tensorflow" not in c.source.split("\n")[0])
    out = cwd / "ampkit-getting-started"
    assert sorted(p.name for p in out.glob("*.json")) == ["audit-what-if.json", "audit.json", "bench.json", "doctor.json",
                                                        "parity.json"]
    page = (out / "report.html").read_text()
    for cls in ("doctor-modes", "bench-results", "parity-results", "audit-layers", "audit-whatif"):
        assert f'<table class="{cls}"' in page, cls


@pytest.mark.slow
def test_each_result_displays_its_table_and_chart_and_a_one_line_repr(executed):
    nb, _ = executed
    bench = result_html(cell(nb, "bench = ampkit.bench("), "bench")
    rows = bench[bench.index('<table class="bench-results"'):]
    assert re.findall(r"<tr><td>(\w+)", rows[:rows.index("</table>")]) == ["fp32", "bf16"]
    assert len(pngs(cell(nb, "bench = ampkit.bench("))) == 1 and "<svg" not in bench  # the chart: an image output
    parity = result_html(cell(nb, "parity = ampkit.parity("), "parity")
    rows = parity[parity.index('<table class="parity-results"'):]
    assert re.findall(r"<tr><td>(\w+)</td>", rows[:rows.index("</table>")]) == ["fp32", "bf16"]
    assert len(pngs(cell(nb, "parity = ampkit.parity("))) == 1
    doctor = result_html(cell(nb, "run_doctor(FRAMEWORK"), "doctor")
    rows = doctor[doctor.index('<table class="doctor-modes"'):]
    assert re.findall(r"<tr><td>(\w+)</td>", rows[:rows.index("</table>")]) == ["fp32", "tf32", "fp16", "bf16", "fp8"]
    audit = result_html(cell(nb, "audit = ampkit.audit("), "audit")
    layers = re.findall(r"<td><code>([^<]+)</code>", audit[audit.index('<table class="audit-layers"'):])
    assert "features.0.0" in layers and "classifier.3" in layers and len(layers) > 100  # every module of MobileNetV3
    assert 'class="audit-whatif"' in result_html(cell(nb, "what_if = ampkit.audit("), "audit")
    reprs = [r for c in nb.cells if c.cell_type == "code" for r in plain_results(c)]
    assert len(reprs) >= 5 and all("\n" not in r and len(r) < 200 for r in reprs), reprs
    printed = "".join(o.text for o in cell(nb, "print(repr(bench))").outputs if o.output_type == "stream")
    assert printed.startswith("<ampkit bench mlp on ") and "fp32 baseline, bf16 " in printed


@pytest.mark.slow
def test_the_progress_of_a_library_call_is_one_display_in_its_cell(executed):
    nb, _ = executed
    bench = cell(nb, "bench = ampkit.bench(")
    assert [o.output_type for o in bench.outputs] == ["display_data"] * 3  # the progress, the result, its chart
    assert re.match(r"ampkit bench mlp — done \([\d.]+ s\): fp32 ok 6/6; bf16 ok 6/6$", bench.outputs[0].data["text/plain"])
    parity = cell(nb, "parity = ampkit.parity(")
    assert [o.output_type for o in parity.outputs] == ["display_data"] * 3
    doctor = cell(nb, "run_doctor(FRAMEWORK")  # its display ends in its final state, not on its last step
    assert doctor.outputs[0].data["text/plain"].endswith("doctor finished"), doctor.outputs[0].data["text/plain"]


@pytest.mark.slow
@pytest.mark.skipif(chromium.find() is None, reason="needs chromium (CI installs Debian's package)")
def test_the_executed_notebook_exported_to_html_shows_the_bench_table_and_chart(executed, tmp_path):
    from nbconvert import HTMLExporter

    nb, _ = executed
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    page = tmp_path / "getting-started.html"
    page.write_text(body, encoding="utf-8")
    visible = """(() => {
      const box = document.querySelector('.ampkit-nb[data-ampkit="bench"]');
      const seen = el => { if (!el) return null; const r = el.getBoundingClientRect(), s = getComputedStyle(el);
        return {w: r.width, h: r.height, shown: s.display !== 'none' && s.visibility === 'visible' && s.opacity !== '0'}; };
      const table = box.querySelector('table.bench-results');
      const outputs = Array.from(document.querySelectorAll('.jp-OutputArea-output'));
      const chart = outputs[outputs.indexOf(box.closest('.jp-OutputArea-output')) + 1].querySelector('img');
      return {table: seen(table), chart: seen(chart), bars: chart.naturalWidth,
              modes: Array.from(table.querySelectorAll('tbody tr > td:first-child')).map(td => td.textContent.trim()),
              align: getComputedStyle(table.querySelector('tbody td')).textAlign};
    })()"""
    loaded = chromium.load_page(str(page), width=1280, height=2400, evaluate={"bench": visible})
    bench = loaded["values"]["bench"]
    assert bench["modes"] == ["fp32", "bf16"]
    assert bench["table"]["shown"] and bench["table"]["w"] > 600 and bench["table"]["h"] > 60
    assert bench["chart"]["shown"] and bench["chart"]["w"] > 400 and bench["chart"]["h"] > 150 and bench["bars"] > 400
    assert bench["align"] == "left"  # the page's own style, not JupyterLab's right-aligned cells
    # what failed to load is nbconvert's own template (require.js, MathJax from a CDN), never ampkit's output
    assert [u for u in loaded["requests"] if not u.startswith(("file:", "data:", "https://cdnjs.cloudflare.com/ajax/libs/"))] == []


BENCH_30 = """import ampkit
r = ampkit.bench(workload="mlp", modes=["fp32"], steps=30, warmup=1, batch_size=8, device="cpu")
r"""


@pytest.mark.slow
def test_a_30_step_bench_from_a_notebook_is_one_updating_display_not_30_lines(tmp_path, monkeypatch):
    import nbformat
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(BENCH_30), nbformat.v4.new_code_cell(
        'quiet = ampkit.bench(workload="mlp", modes=["fp32"], steps=2, warmup=0, batch_size=8, device="cpu", progress=False)\n'
        'quiet')])
    execute(nb, tmp_path, monkeypatch)
    assert problems(nb) == []
    loud, quiet = nb.cells
    assert [o.output_type for o in loud.outputs] == ["display_data"] * 3  # the progress, the result, its chart
    progress = loud.outputs[0].data
    assert re.match(r"ampkit bench mlp — done \([\d.]+ s\): fp32 ok 31/31$", progress["text/plain"])
    assert '<progress value="31" max="31"' in progress["text/html"]
    assert [o.output_type for o in quiet.outputs] == ["display_data"] * 2  # progress=False: no progress display
    assert loud.outputs[1].data["text/plain"].startswith("<ampkit bench mlp on cpu: fp32 baseline")


@pytest.mark.slow
@pytest.mark.skipif(not all(__import__("importlib").util.find_spec(m) for m in ("tensorflow", "keras")),
                    reason="needs TensorFlow and Keras")
def test_the_notebook_on_a_tensorflow_only_machine_runs_keras_throughout(tmp_path, monkeypatch):
    """As the TensorFlow image runs it: doctor, bench and parity on Keras, the keras.applications audit."""
    import nbformat
    nb = execute(nbformat.read(NOTEBOOK, as_version=4), tmp_path, monkeypatch, AMPKIT_NOTEBOOK_QUICK="1",
                 AMPKIT_NOTEBOOK_FRAMEWORKS="tensorflow")
    assert problems(nb) == []
    native = [ln for c in nb.cells for o in c.get("outputs", []) if o.output_type == "stream" and o.name == "stderr"
              for ln in o.text.splitlines() if NATIVE_LOG.match(ln) and ln.strip()]
    assert native == [], native[:5]  # issue #49: TensorFlow's C++ lines (oneDNN, cuInit) are not in the cells
    for text, command in (("run_doctor(FRAMEWORK", "doctor"), ("bench = ampkit.bench(", "bench"),
                          ("keras_bench = ampkit.bench(", "bench"), ("parity = ampkit.parity(", "parity")):
        html = result_html(cell(nb, text), command)
        assert "(tensorflow)" in html or "doctor — tensorflow" in html, text
    keras_bench = result_html(cell(nb, "keras_bench = ampkit.bench("), "bench")
    rows = keras_bench[keras_bench.index('<table class="bench-results"'):]
    assert re.findall(r"<tr><td>(\w+)", rows[:rows.index("</table>")]) == ["fp32", "bf16"]
    assert len(pngs(cell(nb, "keras_bench = ampkit.bench("))) == 1
    audit = result_html(cell(nb, "keras_models:mobilenet"), "audit")
    layers = re.findall(r"<td><code>([^<]+)</code>", audit[audit.index('<table class="audit-layers"'):])
    assert layers[:2] == ["conv", "conv_bn"] and len(layers) > 100  # every layer of MobileNetV3Small
    assert 'class="audit-whatif"' in audit and len(pngs(cell(nb, "keras_models:mobilenet"))) == 1


@pytest.mark.slow
def test_the_saved_notebook_survives_being_shared(executed):
    """Issue #49: opened untrusted (a shared notebook), JupyterLab sanitizes HTML outputs -- styles and
    inline SVG dropped, the charts became text. Each chart is an image/png output of its own, no
    HTML output holds an <svg> or a <style> the page depends on for its charts, no stderr output is a
    framework's native log, and the executed notebook is under 1 MB."""
    nb, cwd = executed
    kinds = {mime for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) for mime in o.get("data", {})}
    assert {"text/html", "image/png", "text/plain"} <= kinds and "image/svg+xml" not in kinds
    for text in ("bench = ampkit.bench(", "parity = ampkit.parity(", "what_if = ampkit.audit("):
        c = cell(nb, text)
        assert pngs(c) and all("<svg" not in h for h in html_outputs(c)), text
    native = [ln for c in nb.cells for o in c.get("outputs", []) if o.output_type == "stream" and o.name == "stderr"
              for ln in o.text.splitlines() if NATIVE_LOG.match(ln) and ln.strip()]
    assert native == []
    size = (cwd / "executed.ipynb").stat().st_size
    assert size < 1_000_000, size
