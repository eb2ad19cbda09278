"""Both images built from docker/Dockerfile and run for real, through docker/test-images.sh.

The README's test command runs this; so does CI, through .ci/run (issue 25). It needs root (to
start dockerd and debootstrap the stand-in bases) and Debian's docker.io where Docker is missing;
elsewhere it skips with the script's reason. AMPKIT_IMAGE_TEST=require (.ci/run sets it) turns
that skip into a failure, so CI cannot pass without building; AMPKIT_IMAGE_TEST=skip skips it.

The first run on a machine builds the stand-in bases (cached in the daemon afterwards) and both
images: about 20-30 minutes on a 2-core machine. Later runs reuse the bases and Docker's layer
cache: a change under src/ rebuilds only the image's last layer.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docker" / "test-images.sh"
MODE = os.environ.get("AMPKIT_IMAGE_TEST", "").strip().lower()

pytestmark = [pytest.mark.images, pytest.mark.slow]

CHECKS = ["build", "container keeps running", "label org.opencontainers.image.title=ampkit-{fw}",
          "{fw} inside", "jupyter answers with the token", "jupyter refuses without the token",
          "jupyter runs as ampkit", "ssh key login as ampkit", "ssh password login refused",
          "ssh root login refused", "doctor verdict in docker logs", "doctor.json in the state dir",
          "healthcheck healthy", "docker stop within 10 s, exit 0"]


def run_image_test(*args: str, timeout: int) -> tuple[int, str]:
    if MODE == "skip":
        pytest.skip("AMPKIT_IMAGE_TEST=skip")
    r = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                       timeout=timeout, stdin=subprocess.DEVNULL, cwd=ROOT)
    out = r.stdout + r.stderr
    if r.returncode == 77:
        reason = next((ln for ln in out.splitlines() if ln.startswith("SKIP: ")), "SKIP: (no reason given)")
        if MODE == "require":
            pytest.fail(f"AMPKIT_IMAGE_TEST=require, but the image test cannot run here: {reason[6:]}")
        pytest.skip(f"docker/test-images.sh: {reason[6:]}")
    return r.returncode, out


@pytest.fixture(scope="module")
def full_run():
    """One full run for the module; a dockerd it started is stopped afterwards (its images stay
    in /var/lib/docker for the next start), so the suite leaves nothing running."""
    rc, out = run_image_test(timeout=3300)
    yield rc, out
    m = re.search(r"dockerd started by this run is left running \(pid (\d+)", out)
    if m:
        pid = int(m.group(1))
        try:
            os.kill(pid, signal.SIGTERM)
            for _ in range(120):
                os.kill(pid, 0)
                time.sleep(0.5)
        except ProcessLookupError:
            pass


@pytest.mark.timeout(3400)
@pytest.mark.parametrize("fw", ["torch", "tensorflow"])
def test_image_builds_and_every_check_passes(full_run, fw):
    rc, out = full_run
    img = f"ampkit:{fw}"
    for check in CHECKS:
        name = check.format(fw=fw)
        assert re.search(rf"^ok   {re.escape(img)}: {re.escape(name)}", out, re.M), f"{img}: {name}\n{out}"
    assert not re.search(rf"^FAIL {re.escape(img)}: ", out, re.M), out
    # sizes and build times are printed
    assert re.search(rf"^  {re.escape(img)} +size \d+\.\d\d GB +build \d+\.\d s$", out, re.M), out
    assert rc == 0, out


@pytest.mark.timeout(3400)
def test_images_stay_in_the_daemon_with_their_labels(full_run):
    rc, out = full_run
    assert rc == 0, out
    for fw in ("torch", "tensorflow"):
        r = subprocess.run(["docker", "image", "inspect", "-f", '{{index .Config.Labels "org.opencontainers.image.title"}}',
                            f"ampkit:{fw}"], capture_output=True, text=True, timeout=60)
        assert r.stdout.strip() == f"ampkit-{fw}", r.stdout + r.stderr


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("kind, check", [
    ("entrypoint-exits", "container keeps running"),
    ("ssh-passwords", "ssh password login refused"),
])
def test_a_broken_image_fails_naming_the_check(full_run, kind, check):
    """An image broken on purpose (built from ampkit:torch in seconds) fails, and the line says which check."""
    if full_run[0] != 0:
        pytest.skip("the images did not build and pass; a broken variant proves nothing then")
    rc, out = run_image_test("--break", kind, timeout=1700)
    assert rc == 1, out
    fails = re.findall(r"^FAIL (ampkit-broken:\S+): (.*?) — ", out, re.M)
    assert (f"ampkit-broken:{kind}", check) in fails, out
    # the failure is that check, not everything at once
    assert len(fails) == 1, fails


@pytest.mark.parametrize("mode, outcome", [("", pytest.skip.Exception), ("require", pytest.fail.Exception)])
def test_a_machine_that_cannot_run_it_skips_unless_required(tmp_path, monkeypatch, mode, outcome):
    """Exit 77 with 'SKIP: reason' is a skip naming the reason; under AMPKIT_IMAGE_TEST=require
    (CI) it is a failure."""
    fake = tmp_path / "test-images.sh"
    fake.write_text("echo 'SKIP: needs root (to start dockerd ...)'; exit 77\n")
    monkeypatch.setattr(sys.modules[__name__], "SCRIPT", fake)
    monkeypatch.setattr(sys.modules[__name__], "MODE", mode)
    with pytest.raises(outcome, match="needs root"):
        run_image_test(timeout=30)


RUNUSER = shutil.which("runuser", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


@pytest.mark.skipif(os.geteuid() != 0 or RUNUSER is None, reason="needs root (and runuser) to run it as another user")
def test_the_script_skips_without_root_or_a_usable_daemon(tmp_path):
    """The real script, as a user who is not root and may not use a daemon: exit 77 and why. It runs
    from a copy in a folder 'nobody' may read: a clone inside a private folder (mode 700, like /root
    or mktemp -d) is unreadable to 'nobody' (issue #40: 'Permission denied', exit 126)."""
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="ampkit-nobody-"))
    try:
        (where / "docker").mkdir()
        copy = where / "docker" / SCRIPT.name
        shutil.copy(SCRIPT, copy)
        for p, mode in ((where, 0o755), (where / "docker", 0o755), (copy, 0o644)):
            p.chmod(mode)
        r = subprocess.run([RUNUSER, "-u", "nobody", "--", "bash", str(copy)], capture_output=True, text=True,
                           timeout=60, cwd="/", env={"PATH": "/usr/bin:/bin", "AMPKIT_IMAGE_TEST_DIR": "/nonexistent"})
    finally:
        shutil.rmtree(where, ignore_errors=True)
    assert r.returncode == 77, r.stdout + r.stderr
    assert r.stdout.startswith("SKIP: needs root"), r.stdout
