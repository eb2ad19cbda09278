"""Parity's seeds x modes grid wherever it runs (#39): shards merged into the serial verdicts,
--resume running only what a document lacks, torchrun spreading the runs over two CPU processes,
a rank killed mid-grid, a silent rank found by its heartbeat, and the same for Keras.

The torchrun tests start real ``python -m torch.distributed.run --standalone`` jobs of two CPU
processes (expensive on a small machine: one test each for the spread and the killed rank)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from ampkit.backends.torch import parity as torch_parity
from ampkit.cli.main import main
from ampkit.parity.report import RunRecord

HERE = os.path.dirname(os.path.abspath(__file__))
#: the grid every test here runs: 2 modes x 4 seeds of one epoch (tolerance 0.05: a pass on digits)
BASE = ["--dataset", "digits", "--modes", "fp32,bf16", "--epochs", "1", "--tolerance", "0.05", "--device", "cpu"]


def _runs(doc: dict) -> dict:
    return {(r["mode"], r["seed"]): r for res in doc["results"] for r in res["runs"]}


def _verdicts(doc: dict) -> dict:
    return {r["mode"]: (r["verdict"], r["delta_vs_fp32"], r["p_value"], (r["equivalence"] or {}).get("ci"))
            for r in doc["results"]}


def _one_line_error(capsys, rc) -> str:
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and err.startswith("ampkit: error: "), err
    return err


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    """The serial run of the grid: (rc, document, path)."""
    path = tmp_path_factory.mktemp("serial") / "serial.json"
    rc = main(["parity", *BASE, "--seeds", "4", "--json", str(path)])
    return rc, json.loads(path.read_text()), path


def test_shards_merge_into_the_serial_verdicts_and_bad_parts_are_one_line(serial, tmp_path, capsys):
    """Acceptance 2: --shard 1/3, 2/3, 3/3 then --merge: the serial run's runs and verdicts; a
    missing part, a duplicated part, a part of another config: one line, exit 2. ampkit report
    reads the partial and the merged documents."""
    rc0, doc0, _ = serial
    parts = [str(tmp_path / f"part{i}.json") for i in (1, 2, 3)]
    order = [(m, s) for s in range(4) for m in ("fp32", "bf16")]
    for i, part in enumerate(parts, 1):
        assert main(["parity", *BASE, "--seeds", "4", "--shard", f"{i}/3", "--json", part]) == 0
        doc = json.loads(open(part).read())
        assert doc["shard"] == f"{i}/3" and doc["grid"]["seeds"] == [0, 1, 2, 3]
        assert sorted(_runs(doc)) == sorted(order[i - 1::3])  # every third run of the serial order
        assert all(r["verdict"] in ("baseline", "inconclusive") and "partial document" in r["reason"]
                   for r in doc["results"])
    capsys.readouterr()
    merged = tmp_path / "merged.json"
    assert main(["parity", "--merge", *parts, "--json", str(merged)]) == rc0 == 0
    doc = json.loads(merged.read_text())
    assert doc["shard"] is None and _verdicts(doc) == _verdicts(doc0)
    assert {k: r["test_accuracy"] for k, r in _runs(doc).items()} == \
        {k: r["test_accuracy"] for k, r in _runs(doc0).items()}

    err = _one_line_error(capsys, main(["parity", "--merge", parts[0], parts[1]]))
    assert "lack 2 run(s)" in err and "shard 3/3 not given" in err
    err = _one_line_error(capsys, main(["parity", "--merge", parts[0], parts[1], parts[2], parts[1]]))
    assert "is in both part2.json (shard 2/3) and part2.json (shard 2/3)" in err
    other = str(tmp_path / "other.json")
    assert main(["parity", *BASE, "--tolerance", "0.02", "--seeds", "4", "--shard", "3/3",
                 "--json", other]) == 0
    capsys.readouterr()
    err = _one_line_error(capsys, main(["parity", "--merge", parts[0], parts[1], other]))
    assert "belongs to another grid" in err and "tolerance is 0.02" in err

    md = tmp_path / "report.md"
    assert main(["report", parts[0], str(merged), "--markdown", str(md)]) == 0
    text = md.read_text()
    assert "partial: shard 1/3" in text and "no verdict until the parts are merged" in text


def test_resume_runs_only_what_the_document_lacks(serial, tmp_path, capsys, monkeypatch):
    """Acceptance 3: --resume with --seeds 6 on the 4-seed document runs seeds 4 and 5 of each mode
    and nothing else; the verdict is over all 6 seeds. A run that raised is run again; a resume
    with another config is one line."""
    _, doc0, path0 = serial
    grown = tmp_path / "grown.json"
    shutil.copy(path0, grown)
    ran = []
    real = torch_parity.train_one

    def spy(make_model, mode, seed, *a, **k):
        ran.append((mode, seed))
        return real(make_model, mode, seed, *a, **k)

    monkeypatch.setattr(torch_parity, "train_one", spy)
    rc = main(["parity", *BASE, "--seeds", "6", "--resume", str(grown)])
    assert rc in (0, 1) and ran == [("fp32", 4), ("bf16", 4), ("fp32", 5), ("bf16", 5)]
    assert "it holds 8 run(s); 4 to run" in capsys.readouterr().err
    doc = json.loads(grown.read_text())  # written back in place
    assert doc["grid"]["seeds"] == list(range(6)) and all(r["seeds"] == list(range(6)) for r in doc["results"])
    runs, before = _runs(doc), _runs(doc0)
    assert all(runs[k] == before[k] for k in before)  # kept as they were, never rerun

    # a run that raised (a dead rank's row) is run again, and only it
    for res in doc["results"]:
        for r in res["runs"]:
            if (r["mode"], r["seed"]) == ("bf16", 2):
                r["error"] = "rank 1 ended during this run without a result (killed or crashed)"
    grown.write_text(json.dumps(doc))
    ran.clear()
    assert main(["parity", *BASE, "--resume", str(grown)]) in (0, 1) and ran == [("bf16", 2)]
    assert _runs(json.loads(grown.read_text()))[("bf16", 2)]["error"] is None

    capsys.readouterr()
    err = _one_line_error(capsys, main(["parity", *BASE, "--epochs", "2", "--resume", str(grown)]))
    assert "belongs to another grid" in err and "epochs" in err and ran == [("bf16", 2)]


@pytest.mark.parametrize("args, words", [
    (["--shard", "4/3", "--json", "x.json"], "between 1 and N"),
    (["--shard", "two", "--json", "x.json"], "must look like I/N"),
    (["--shard", "1/2"], "give --json PATH"),
    (["--merge", "a.json", "--dataset", "digits"], "--dataset belong(s) to a run"),
    (["--merge", "missing.json"], "no such file"),
    (["--resume", "missing.json"], "no such file"),
])
def test_grid_flags_refuse_bad_input_in_one_line(args, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = _one_line_error(capsys, main(["parity", *args]))
    assert words in err


def test_the_timeout_is_a_positive_number(monkeypatch):
    from ampkit.backends.torch.parity_group import TIMEOUT_ENV, timeout_s
    from ampkit.errors import UsageError

    monkeypatch.setenv(TIMEOUT_ENV, "2.5")
    assert timeout_s() == 2.5
    for bad in ("abc", "0", "-1", "nan"):
        monkeypatch.setenv(TIMEOUT_ENV, bad)
        with pytest.raises(UsageError, match="positive number of seconds"):
            timeout_s()


def test_a_silent_rank_is_failed_rows_within_the_timeout(monkeypatch):
    """The collective timeout, in-process: rank 1 posted one run, started another and fell silent
    (its heartbeat stops). Rank 0 waits the timeout, then the run it was in and the one it never
    reached are rows marked failed -- never a hang. Stopped by the launcher instead (rank 0
    interrupted), only the run it was in is failed and the unreached one is left for --resume."""
    from torch.distributed import PrefixStore, TCPStore

    from ampkit.backends.torch.parity_group import ParityGroup

    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(server.port))
    own = [RunRecord("fp32", s, [1.0], [0.9], [0.5], 0, 0.1, rank=0) for s in (0, 1)]
    owners = {("fp32", 0): 0, ("bf16", 0): 1, ("fp32", 1): 0, ("bf16", 1): 1, ("bf16", 2): 1}
    for interrupted in (False, True):
        monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", str(int(interrupted)))  # a fresh key space
        group = ParityGroup(None, 0, 2, timeout=1.0)
        peer = PrefixStore(group.prefix, server)
        peer.set("hb/1", "7")
        peer.set("run/bf16/0", json.dumps({**RunRecord("bf16", 0, [1.0], [0.88], [0.5], 0, 0.1).__dict__, "rank": 1}))
        peer.set("cur/1", "bf16/1")
        t0 = time.monotonic()
        records, stopped = group.collect(list(own), owners, interrupted)
        elapsed = time.monotonic() - t0
        group.close()
        got = {(r.mode, r.seed): r for r in records}
        assert stopped is interrupted and 1.0 <= elapsed < 8.0, elapsed
        assert got[("bf16", 0)].test_accuracy == [0.88] and got[("bf16", 0)].rank == 1 and not got[("bf16", 0)].error
        assert got[("bf16", 1)].rank == 1 and got[("bf16", 1)].error.startswith("rank 1 ")
        if not interrupted:
            assert got[("bf16", 1)].error == ("rank 1 stopped answering (no heartbeat for 1 s: killed, crashed, "
                                              "or its node lost)")
            assert got[("bf16", 2)].error.endswith("this run was not reached")
            assert [k for k in got] == list(owners)
        else:
            assert "ended during this run without a result" in got[("bf16", 1)].error and ("bf16", 2) not in got


def _torchrun(args, tmp_path, timeout_env=None, cwd=None):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.path.join(HERE, "..", "..", "src"),
                                                                      os.environ.get("PYTHONPATH")]))}
    if timeout_env:
        env["AMPKIT_PARITY_TIMEOUT"] = timeout_env
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        "-m", "ampkit", "parity", *args], capture_output=True, text=True, timeout=600, env=env,
                       cwd=cwd or str(tmp_path))
    return r, time.monotonic() - t0


def _alive_with(marker: str) -> list[str]:
    """Processes whose command line names ``marker`` (a test's own output path)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmd:
                found.append(f"{pid}: {cmd}")
    return found


@pytest.mark.slow
def test_torchrun_spreads_the_grid_over_two_processes_with_the_serial_results(serial, tmp_path):
    """Acceptance 1 and 4 (identical runs): torchrun --nproc-per-node 2 ... --seeds 4: exit 0 (as the
    serial run), one document of 8 runs, each recording its rank, both ranks used, and every
    (mode, seed) run's accuracies equal to the serial run's."""
    rc0, doc0, _ = serial
    out = tmp_path / "out.json"
    r, _ = _torchrun([*BASE, "--seeds", "4", "--json", str(out)], tmp_path)
    assert r.returncode == rc0 == 0, r.stderr[-3000:]
    doc = json.loads(out.read_text())
    runs = _runs(doc)
    assert len(runs) == 8 and doc["world_size"] == 2 and {r["rank"] for r in runs.values()} == {0, 1}
    assert {k: r["test_accuracy"] for k, r in runs.items()} == {k: r["test_accuracy"] for k, r in _runs(doc0).items()}
    assert _verdicts(doc) == _verdicts(doc0)
    assert "rank 1/2 on cpu: 4 of 8 run(s)" in r.stderr and "rank 0/2: seed" in r.stderr


KILLED = ["--model", "parity_grid_factories:dies_on_rank1_seed1", "--data", "parity_grid_factories:blobs", "--modes",
          "fp32,bf16", "--seeds", "2", "--epochs", "1", "--device", "cpu"]


def _plain_ranks(args, env_extra):
    """Two ranks as plain processes (a launcher that does not stop the group when one dies, as
    ``srun`` or a Kubernetes job may): rank 0 hosts the store. Returns ([rc0, rc1], rank 0's stderr)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in (0, 1):
        env = {**os.environ, **env_extra, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
               "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        procs.append(subprocess.Popen([sys.executable, "-m", "ampkit", "parity", *args], env=env, cwd=HERE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=300) for p in procs]
    return [p.returncode for p in procs], outs[0][1]


@pytest.mark.slow
def test_a_rank_killed_mid_grid_is_a_failed_row_and_nothing_hangs(tmp_path):
    """Acceptance 4: rank 1 dies of SIGKILL as its run of bf16 seed 1 starts.

    Under torchrun, whose agent then stops the whole group (SIGTERM): rank 0 writes the document
    with that run's row marked failed (rank 1), torchrun exits 1, no process is left. Under a
    launcher that leaves the others running: rank 0 finishes all its runs, finds rank 1 silent
    within AMPKIT_PARITY_TIMEOUT (5 s) of its death, writes the document with the failed row and
    exits 1."""
    env = {"AMPKIT_PARITY_TIMEOUT": "5", "PYTHONPATH": os.pathsep.join(
        filter(None, [os.path.join(HERE, "..", "..", "src"), os.environ.get("PYTHONPATH")]))}
    out = tmp_path / "killed.json"
    r, _ = _torchrun([*KILLED, "--json", str(out)], tmp_path, timeout_env="5", cwd=HERE)
    assert r.returncode == 1, r.stderr[-3000:]
    runs = _runs(json.loads(out.read_text()))
    dead = runs[("bf16", 1)]
    assert dead["rank"] == 1 and dead["error"] == "rank 1 ended during this run without a result (killed or crashed)"
    assert runs[("bf16", 0)]["rank"] == 1 and runs[("bf16", 0)]["error"] is None and dead["test_accuracy"] == []
    time.sleep(0.5)
    assert _alive_with(str(out)) == []

    out, death = tmp_path / "plain.json", tmp_path / "death"
    rcs, err = _plain_ranks([*KILLED, "--json", str(out)], {**env, "DEATH_FILE": str(death)})
    ended = time.time()
    assert rcs == [1, -9], err[-3000:]
    doc = json.loads(out.read_text())
    runs = _runs(doc)
    assert len(runs) == 4 and all(runs[("fp32", s)]["error"] is None and runs[("fp32", s)]["rank"] == 0 for s in (0, 1))
    assert runs[("bf16", 1)]["error"] == "rank 1 stopped answering (no heartbeat for 5 s: killed, crashed, or its node lost)"
    assert doc["results"][1]["verdict"] == "fail" and "seed 1: rank 1 stopped answering" in doc["results"][1]["reason"]
    assert ended - float(death.read_text()) < 5 + 30  # the timeout, rank 0's own short runs and its exit
    assert _alive_with(str(out)) == []


@pytest.mark.slow
@pytest.mark.tensorflow
def test_keras_shards_merge_into_the_serial_run(tmp_path):
    """Acceptance 5: --framework tensorflow --shard 1/2, 2/2 then --merge: the serial run's runs and
    verdicts; no torch collective is involved (one child process: one TensorFlow import)."""
    if importlib.util.find_spec("tensorflow") is None:  # not importorskip: TensorFlow stays out of this process
        pytest.skip("needs tensorflow")
    base = ["parity", "--framework", "tensorflow", "--dataset", "digits", "--modes", "fp32,bf16", "--seeds", "2",
            "--epochs", "1", "--device", "cpu"]
    paths = {name: str(tmp_path / f"{name}.json") for name in ("serial", "p1", "p2", "merged")}
    cases = [[*base, "--json", paths["serial"]], [*base, "--shard", "1/2", "--json", paths["p1"]],
             [*base, "--shard", "2/2", "--json", paths["p2"]],
             ["parity", "--merge", paths["p1"], paths["p2"], "--json", paths["merged"]],
             ["parity", "--merge", paths["p1"], paths["p1"]]]
    child = ("import json, sys\nfrom ampkit.cli.main import main\n"
             "print('RCS=' + json.dumps([main(a) for a in json.loads(sys.argv[1])]))")
    r = subprocess.run([sys.executable, "-c", child, json.dumps(cases)], capture_output=True, text=True, timeout=600)
    assert "RCS=" in r.stdout, r.stderr[-3000:]
    rcs = json.loads(r.stdout.split("RCS=", 1)[1])
    serial_doc, merged = (json.loads(open(paths[k]).read()) for k in ("serial", "merged"))
    assert rcs[1:3] == [0, 0] and rcs[3] == rcs[0] and rcs[4] == 2
    assert merged["framework"] == "tensorflow" and _verdicts(merged) == _verdicts(serial_doc)
    assert {k: r["test_accuracy"] for k, r in _runs(merged).items()} == \
        {k: r["test_accuracy"] for k, r in _runs(serial_doc).items()}
    assert "is in both p1.json (shard 1/2) and p1.json (shard 1/2)" in r.stderr
