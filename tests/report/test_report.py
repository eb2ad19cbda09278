"""ampkit report: documents from real (small) runs of all four commands, plus a second machine.

The documents are produced once per session by running the commands (CPU, tiny sizes); the page
is loaded from disk by headless Chromium with networking off (tests/chromium.py).
"""

from __future__ import annotations

import copy
import io
import json
import os
import re
import subprocess
import sys

import pytest

import chromium
from helpers import assert_usage_error

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "src")
RUNS = {
    "doctor": ["doctor", "--quick", "--device", "cpu"],
    "bench": ["bench", "--device", "cpu", "--workload", "mlp", "--modes", "fp32,bf16", "--steps", "3", "--warmup", "1"],
    "parity": ["parity", "--device", "cpu", "--seeds", "2", "--epochs", "1"],
    # a loss scale far beyond fp16's range: the backward pass overflows, so there is a first inf/NaN to show
    "audit": ["audit", "--device", "cpu", "--workload", "mlp", "--loss-scale", "1e18"],
}


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    return env


def ampkit(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ampkit", *map(str, args)], capture_output=True, text=True,
                          env=_env(), cwd=cwd, timeout=300, check=False)


def _other(current, value, alternative):
    """``value``, unless the machine running the tests happens to have exactly that."""
    return alternative if current == value else value


def second_machine(doctor: dict) -> dict:
    """This machine's doctor document as if written on a GPU host with other versions and verdicts."""
    doc = copy.deepcopy(doctor)
    env = doc["environment"]
    gpu = "NVIDIA A100-SXM4-80GB"
    if any(g.get("name") == gpu for g in env.get("gpus") or []):
        gpu = "NVIDIA H100 80GB HBM3"
    env.update(framework_version=_other(env.get("framework_version"), "2.5.1+cu124", "2.6.0+cu126"),
               cuda_runtime=_other(env.get("cuda_runtime"), "12.4", "12.6"),
               cudnn=_other(env.get("cudnn"), 90100, 90501), cuda_available=True, device="cuda:0",
               device_name=gpu, compute_capability="8.0",
               driver_version=_other(env.get("driver_version"), "550.54.15", "560.35.03"),
               python=_other(env.get("python"), "3.10.14", "3.12.7"),
               gpus=[{"index": i, "name": gpu, "compute_capability": "8.0"} for i in range(4)])
    cpu = env.get("cpu") or {}
    # the other kind of CPU: AVX2 only where this one has AVX512-BF16, and the reverse
    native = bool(cpu.get("avx512_bf16"))
    env["cpu"] = dict(cpu, model="AMD EPYC 7763 64-Core Processor", avx2=True, avx512f=not native,
                      avx512_bf16=not native, avx512_fp16=False, amx_tile=not native, amx_bf16=not native,
                      amx_fp16=False, torch_cpu_capability="AVX2" if native else "AVX512")
    doc["device"] = "cuda:0"
    for mode, speedup, verdict in (("tf32", 2.6, "usable"), ("fp16", 3.1, "usable"), ("bf16", 3.0, "recommended")):
        doc["modes"][mode].update(supported=True, accelerated=True, speedup=speedup,
                                  speedup_ci=[speedup * 0.95, speedup * 1.05], rounds=5, selftest="pass",
                                  verdict=verdict, reason=f"measured {speedup}x fp32")
    doc["modes"]["fp32"].update(verdict="usable")
    # a recommendation other than this machine's (its --quick doctor says the cached verdict, which may be bf16)
    rec = "fp16" if doctor.get("recommended") == "bf16" else "bf16"
    if rec == "fp16":
        doc["modes"]["fp16"].update(verdict="recommended")
        doc["modes"]["bf16"].update(verdict="usable")
    doc.update(recommended=rec, reason=f"{rec} measured {doc['modes'][rec]['speedup']}x fp32", quick=False)
    return doc


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    """Real documents from the four commands, plus a second machine's doctor document.
    One at a time: run side by side they fight over the 2 cores and take longer in all. All four in one
    child process, ampkit's ``main(argv)`` once per command (the CLI's own entry): one Python and torch
    start-up instead of four (each command's modes and seeds still run in children of their own)."""
    d = tmp_path_factory.mktemp("docs")
    argvs = [[*args, "--json", str(d / f"{name}.json")] for name, args in RUNS.items()]
    child = ("import json, sys\nfrom ampkit.cli.main import main\n"
             "print('RCS=' + json.dumps([main(a) for a in json.loads(sys.argv[1])]))")
    res = subprocess.run([sys.executable, "-c", child, json.dumps(argvs)], capture_output=True, text=True,
                         env=_env(), timeout=600, check=False)
    assert "RCS=" in res.stdout, res.stderr[-3000:]
    rcs = json.loads(res.stdout.rsplit("RCS=", 1)[1])
    for name, rc in zip(RUNS, rcs, strict=True):
        # audit exits 1: it found the inf/NaN it was set up to find
        assert rc in (0, 1) and (d / f"{name}.json").exists(), (name, rc, res.stderr[-2000:])
    doctor = json.loads((d / "doctor.json").read_text())
    (d / "doctor_b.json").write_text(json.dumps(second_machine(doctor)))
    return d


def paths(docs, *names):
    return [str(docs / f"{n}.json") for n in names]


ALL = ("doctor", "bench", "parity", "audit", "doctor_b")


@pytest.fixture(scope="module")
def page(docs, tmp_path_factory):
    out = tmp_path_factory.mktemp("page") / "report.html"
    res = ampkit("report", *paths(docs, *ALL), "--html", out)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ""
    return out


# ---------------------------------------------------------------- acceptance 1: Chromium
@pytest.mark.skipif(chromium.find() is None, reason="needs chromium (CI installs Debian's package)")
def test_chromium_renders_the_page_offline_with_tables_and_charts(page, tmp_path):
    import numpy as np
    from PIL import Image

    loaded = chromium.load_page(str(page), width=1280, height=2200)
    assert loaded["errors"] == []
    assert [u for u in loaded["requests"] if not u.startswith(("file:", "data:"))] == []
    # the screenshot holds rendered content: many colours, a fair share of non-white pixels
    shot = tmp_path / "shot.png"
    shot.write_bytes(loaded["png"])
    img = Image.open(io.BytesIO(loaded["png"])).convert("RGB")
    assert img.size == (1280, 2200)
    pixels = np.asarray(img.resize((320, 550))).reshape(-1, 3).astype(int)
    ink = float((pixels.sum(axis=1) < 720).mean())   # share of pixels that are not (near) white
    assert ink > 0.05, ink
    assert len(np.unique(pixels, axis=0)) > 50
    dom = loaded["dom"]
    for cls in ("verdicts", "env-diff", "doctor-modes", "bench-results", "parity-results", "audit-findings",
                "audit-layers"):
        assert re.search(rf'<table class="{cls}"', dom), cls
    assert len(re.findall(r'<svg[^>]*class="chart"', dom)) == 3  # bench, parity, audit
    assert 'class="first-nonfinite"' in dom and "First inf/NaN:" in dom
    # two environments, and the differing rows flagged
    assert 'id="env-a"' in dom and 'id="env-b"' in dom
    diff = dom[dom.index('class="env-diff"'):]
    diff = diff[:diff.index("</table>")]
    for label in ("framework", "CUDA", "cuDNN", "driver", "GPU", "CPU ISA", "Python"):
        assert re.search(rf'<tr class="differs"><th>{label}</th>', diff), label
    assert not re.search(r'<tr class="differs"><th>ampkit</th>', diff)
    verdicts = dom[dom.index('class="verdicts"'):]
    assert re.search(r'<tr class="differs"><th>doctor: recommended</th>', verdicts)


# ---------------------------------------------------------------- acceptance 2: no external URL
def test_html_references_no_external_url(page):
    html = page.read_text()
    refs = re.findall(r'\b(?:src|href|xlink:href|action|poster|data)\s*=\s*["\']([^"\']*)["\']', html, flags=re.IGNORECASE)
    assert refs, "expected internal links (anchors, SVG references)"
    assert [r for r in refs if not r.startswith(("#", "data:"))] == []
    assert re.findall(r"url\(\s*['\"]?(?!#)", html) == []      # CSS/SVG url() only to fragments
    assert "@import" not in html and "<script" not in html.lower() and "<link" not in html.lower()
    # any other URL text is an XML namespace name, never fetched
    urls = set(re.findall(r'https?://[^\s"\'<>)]+', html))
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}, urls


# ---------------------------------------------------------------- acceptance 3: malformed inputs
def _write(tmp, name, text):
    p = tmp / name
    p.write_text(text)
    return str(p)


def _binary(tmp, name, data):
    p = tmp / name
    p.write_bytes(data)
    return str(p)


BAD_INPUTS = {
    # case: (make the argument list in tmp (given the real docs), the text the one error line must hold)
    "not JSON": (lambda t, d: [_write(t, "notes.json", "doctor said fp16 is fine\n")], "notes.json: not a JSON document"),
    "another tool's JSON": (lambda t, d: [_write(t, "package.json", '{"name": "left-pad", "version": "1.3.0"}')],
                            "package.json: not an ampkit document"),
    "a JSON list": (lambda t, d: [_write(t, "list.json", "[1, 2, 3]")], "list.json: not an ampkit document"),
    "an unknown command": (lambda t, d: [_write(t, "train.json", '{"ampkit_version": "0.1.0", "command": "train", '
                                                                 '"environment": {}}')], "'command' is 'train'"),
    "truncated": (lambda t, d: [_write(t, "bench_cut.json", (d / "bench.json").read_text()[:700])],
                  "bench_cut.json: truncated JSON"),
    "empty file": (lambda t, d: [_write(t, "empty.json", "")], "empty.json: the file is empty"),
    "an image": (lambda t, d: [_binary(t, "plot.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")],
                 "plot.png: not a JSON document"),
    "a key missing": (lambda t, d: [_write(t, "nores.json", json.dumps(
        {k: v for k, v in json.loads((d / "bench.json").read_text()).items() if k != "results"}))],
                      "nores.json: not an ampkit document: lacks the key 'results'"),
    "a bad value": (lambda t, d: [_write(t, "badstatus.json", (d / "bench.json").read_text().replace(
        '"status": "ok"', '"status": "fine"', 1))], "results[0].status is 'fine'"),
    "no files": (lambda t, d: [], "no documents given"),
    "a missing file": (lambda t, d: [str(t / "nowhere.json")], "nowhere.json: no such file"),
    "a directory": (lambda t, d: [str(t)], "is a directory"),
    "a good file, then a bad one": (lambda t, d: [str(d / "doctor.json"), _write(t, "x.json", "{")],
                                    "x.json: truncated JSON"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_and_exit_2(case, docs, tmp_path):
    make, needle = BAD_INPUTS[case]
    out = tmp_path / "r.html"
    res = ampkit("report", *make(tmp_path, docs), "--html", out)
    assert_usage_error(res, needle)
    assert not out.exists()


BAD_OUTPUTS = {
    "missing folder": (lambda t: ["--html", t / "no" / "r.html"], "does not exist"),
    "a directory": (lambda t: ["--html", t], "is a folder"),
    "wrong extension": (lambda t: ["--html", t / "r.txt"], "should end in .html"),
    "markdown extension": (lambda t: ["--markdown", t / "r.html"], "should end in .md"),
    "html to stdout": (lambda t: ["--html", "-"], "--html needs a file name"),
    "plots is a file": (lambda t: ["--plots", _write(t, "f.png", "")], "--plots"),
}


@pytest.mark.parametrize("case", list(BAD_OUTPUTS))
def test_bad_output_path_fails_before_reading(case, tmp_path):
    make, needle = BAD_OUTPUTS[case]
    # the input is missing too: the output path is checked first
    res = ampkit("report", tmp_path / "missing.json", *make(tmp_path))
    assert_usage_error(res, needle)


def test_refuses_to_overwrite_an_input(docs, tmp_path):
    src = tmp_path / "doc.html"
    src.write_text((docs / "doctor.json").read_text())
    res = ampkit("report", src, "--html", src)
    assert_usage_error(res, "is one of the input documents")
    assert json.loads(src.read_text())["command"] == "doctor"


# ---------------------------------------------------------------- behaviour
def test_interrupted_document_is_rendered_and_marked(docs, tmp_path):
    bench = json.loads((docs / "bench.json").read_text())
    bench["interrupted"] = True
    bench["results"] = bench["results"][:1]
    p = tmp_path / "bench_interrupted.json"
    p.write_text(json.dumps(bench))
    res = ampkit("report", p, "--html", tmp_path / "r.html", "--markdown", tmp_path / "r.md")
    assert res.returncode == 0, res.stderr
    html = (tmp_path / "r.html").read_text()
    assert 'data-interrupted="true"' in html and "bench_interrupted.json" in html
    assert "interrupted" in (tmp_path / "r.md").read_text()


def test_speedup_intervals_and_max_batch_are_shown_when_present(docs, tmp_path):
    bench = json.loads((docs / "bench.json").read_text())
    for row, ci in zip(bench["results"], ([1.0, 1.0], [0.78, 0.91])):
        row.update(repeats=3, speedup_ci=ci, max_batch_size=4096)
    p = tmp_path / "bench_ci.json"
    p.write_text(json.dumps(bench))
    res = ampkit("report", p, "--html", tmp_path / "r.html")
    assert res.returncode == 0, res.stderr
    html = (tmp_path / "r.html").read_text()
    assert "[0.78, 0.91]" in html and "<th>repeats</th>" in html and "<th>max batch</th>" in html
    assert "max batch size" in html  # the chart's panel title (SVG text)


def test_markdown_with_png_plots(docs, tmp_path):
    md = tmp_path / "out" / "report.md"
    md.parent.mkdir()
    res = ampkit("report", *paths(docs, *ALL), "--markdown", md, "--plots", tmp_path / "out" / "plots")
    assert res.returncode == 0, res.stderr
    text = md.read_text()
    assert text.startswith("## ampkit report")
    assert "| **≠** framework |" in text and "| **≠** CUDA |" in text and "| ampkit |" in text
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert len(links) == 3 and all(link.startswith("plots/") and link.endswith(".png") for link in links)
    for link in links:
        assert (md.parent / link).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # every table row has as many cells as its header
    for block in re.findall(r"(?:^\|.*\|\n)+", text, flags=re.MULTILINE):
        rows = block.strip().splitlines()
        widths = {len(re.findall(r"(?<!\\)\|", row)) for row in rows}
        assert len(widths) == 1, block


def test_markdown_to_stdout(docs):
    res = ampkit("report", *paths(docs, "doctor", "bench"), "--markdown", "-")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("## ampkit report") and "**bench** mlp" in res.stdout


def test_without_outputs_prints_a_summary_and_how_to_get_the_page(docs, tmp_path):
    res = ampkit("report", *paths(docs, *ALL), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "doctor: recommended" in res.stdout and "bench mlp: bf16" in res.stdout and "audit mlp: fp16" in res.stdout
    assert "--html" in res.stderr
    assert os.listdir(tmp_path) == []
    help_text = ampkit("report", "--help").stdout
    assert "Without --html or --markdown" in help_text


def test_grouping_by_environment_and_framework_all_documents(docs):
    sys.path.insert(0, SRC)
    from ampkit.report import build, load, load_all

    same = build(load_all(paths(docs, "doctor", "bench", "parity", "audit")))
    assert len(same.environments) == 1 and len(same.environments[0].docs) == 4
    two = build(load_all(paths(docs, *ALL)))
    assert [len(e.docs) for e in two.environments] == [4, 1]
    b = two.environments[1]
    assert b.fields["gpu"].startswith("4× NVIDIA") and b.fields["cudnn"] in ("9.1.0", "9.5.1")
    # --framework all: one file, two documents (torch and tensorflow environments)
    doctor = json.loads((docs / "doctor.json").read_text())
    tf = copy.deepcopy(doctor)
    tf["framework"] = "tensorflow"
    tf["environment"].update(framework="tensorflow", framework_version="2.21.0", keras_version="3.15.0")
    combined = {"ampkit_version": doctor["ampkit_version"], "command": "doctor", "environment": doctor["environment"],
                "frameworks": {"torch": doctor, "tensorflow": tf}}
    p = docs / "doctor_all.json"
    p.write_text(json.dumps(combined))
    parts = load(str(p))
    assert [d.part for d in parts] == ["torch", "tensorflow"]
    rep = build(parts)
    assert [e.fields["framework"].split()[0] for e in rep.environments] == ["torch", "tensorflow"]


def test_report_needs_neither_torch_nor_tensorflow(docs, tmp_path):
    """The report reads JSON only: rendering it imports no framework."""
    code = (
        "import sys\n"
        "from ampkit.cli.main import main\n"
        f"rc = main(['report', *{paths(docs, *ALL)!r}, '--html', {str(tmp_path / 'r.html')!r}])\n"
        "assert rc == 0\n"
        "bad = [m for m in ('torch', 'tensorflow', 'keras') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120,
                         check=False)
    assert res.returncode == 0, res.stderr


def test_same_verdicts_from_more_documents_are_not_flagged_and_tf_keras_is_its_own_environment(docs, tmp_path):
    sys.path.insert(0, SRC)
    from ampkit.report import build, load_all

    doctor = json.loads((docs / "doctor.json").read_text())
    twin = tmp_path / "twin.json"
    twin.write_text(json.dumps(doctor))
    other = copy.deepcopy(doctor)
    other["environment"]["python"] = "3.12.0"  # another environment with the very same verdicts
    (tmp_path / "other.json").write_text(json.dumps(other))
    rep = build(load_all([str(docs / "doctor.json"), str(twin), str(tmp_path / "other.json")]))
    assert len(rep.environments) == 2 and [len(e.docs) for e in rep.environments] == [2, 1]
    assert not any(row["differs"] for row in rep.verdict_rows())  # two documents here, one there: same answer
    k3, k2 = copy.deepcopy(doctor), copy.deepcopy(doctor)
    for d, keras in ((k3, "keras 3.15.1"), (k2, "tf_keras 2.21.0")):
        d["framework"] = "tensorflow"
        d["environment"].update(framework="tensorflow", framework_version="2.21.0", keras_version="3.15.1", keras=keras)
    (tmp_path / "k3.json").write_text(json.dumps(k3))
    (tmp_path / "k2.json").write_text(json.dumps(k2))
    rep = build(load_all([str(tmp_path / "k3.json"), str(tmp_path / "k2.json")]))
    assert [e.fields["framework"] for e in rep.environments] == ["tensorflow 2.21.0, keras 3.15.1",
                                                                  "tensorflow 2.21.0, tf_keras 2.21.0"]
