"""How the isolated child that probes a user's ``--model`` starts: forked from the ``ampkit`` program
on a CPU target (torch is already imported there: the child skips that import, about 2 s of CPU),
spawned fresh in a library caller's process (whose threads and CUDA state are the caller's). Either
way the factory's failure is the same one line."""

from __future__ import annotations

import subprocess
import sys
import textwrap

FACTORY = textwrap.dedent('''
    import sys

    def model():
        # ampkit.cli.bench is imported by the ampkit program, never by a freshly spawned child
        print("FORKED=%s" % ("ampkit.cli.bench" in sys.modules), file=sys.stderr, flush=True)
        raise ValueError("no model today")
''')

ARGS = ["--device", "cpu", "--model", "probed:model", "--input-shape", "8", "--modes", "fp32", "--steps", "2"]


def _run(code: str, tmp_path):
    (tmp_path / "probed.py").write_text(FACTORY)
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_the_program_forks_its_probe_on_a_cpu_and_says_the_factorys_error(tmp_path):
    # main() with no argv: the program itself (a test's main(argv) is a library caller, owning nothing)
    r = _run(f"import sys; from ampkit.cli.main import main; sys.argv = ['ampkit', 'bench', *{ARGS!r}]; sys.exit(main())",
             tmp_path)
    assert r.returncode == 2, r.stderr[-3000:]
    assert "FORKED=True" in r.stderr, r.stderr[-3000:]
    assert "ampkit: error: calling probed:model() failed: ValueError: no model today" in r.stderr


def test_a_library_callers_probe_is_spawned(tmp_path):
    code = ("import ampkit\n"
            "try:\n"
            "    ampkit.bench(model='probed:model', input_shape=(8,), modes=['fp32'], steps=2, device='cpu',"
            " progress=False)\n"
            "except Exception as exc:\n"
            "    print('RAISED', type(exc).__name__, exc)\n")
    r = _run(code, tmp_path)
    assert "FORKED=False" in r.stderr, r.stderr[-3000:]
    assert "RAISED UsageError" in r.stdout and "no model today" in r.stdout, (r.stdout, r.stderr[-2000:])
