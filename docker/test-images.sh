#!/usr/bin/env bash
# Build both images from docker/Dockerfile without a registry and check each container from outside.
#
#   bash docker/test-images.sh [--only torch|tensorflow] [--break entrypoint-exits|ssh-passwords]
#                              [--rebuild-bases] [--stop-daemon]
#
# 1. A Docker daemon: the running one, or (as root) dockerd started here with
#    --iptables=false --ip-masq=false --bridge=none, after `apt-get install docker.io` where missing.
# 2. Stand-in bases for the real ones (which need Docker Hub): Debian bookworm from debootstrap,
#    imported with `docker import`, with a CPython 3.11 that every pin accepts (the lowest is in the
#    constraints files' header, from docker/lock.sh; Debian's own 3.11.2 is too old, so this
#    machine's CPython 3.11 is copied in), a current pip, and the framework version of the real
#    tag from PyPI. Kept in the daemon and reused by later runs (--rebuild-bases rebuilds them).
# 3. ampkit:torch and ampkit:tensorflow from docker/Dockerfile, as a user builds them, with the
#    stand-ins as TORCH_IMAGE / TENSORFLOW_IMAGE. They stay in the daemon afterwards.
# 4. For each image, a container on the host's network (ports on 127.0.0.1 only), checked from
#    outside: the doctor's verdict in `docker logs` and doctor.json in the state dir; SSH key login
#    as ampkit, password and root logins refused; JupyterLab 200 with the token, 403 without, not
#    running as root; no other framework inside; the getting-started notebook in JupyterLab's folder
#    and executed there as ampkit (nbclient, AMPKIT_NOTEBOOK_QUICK=1) without error output; the
#    healthcheck healthy; `docker stop` within 10 s with exit code 0. Each check prints "ok" or
#    "FAIL IMAGE: CHECK — why".
#
# --break KIND checks a deliberately broken variant of the torch image instead (built from it in
# seconds; the checks must fail, naming the check): entrypoint-exits (the entrypoint exits at
# once), ssh-passwords (sshd offers password logins). --stop-daemon stops a dockerd this run
# started (the test suite uses it; by default it is left running so the images can be used).
#
# Exit codes: 0 every check passed; 1 a build or check failed; 2 bad usage; 77 cannot run on this
# machine (a line "SKIP: reason": not root, no docker.io to install, no CPython 3.11 to use).
# docs/images.md explains it all. Needs root, Debian's apt for what is missing, and about 15 GB.
set -uo pipefail
{ # read whole before running: editing this file during a run cannot change the run
cd "$(dirname "$0")/.."
ROOT=$PWD

ONLY="" BREAK="" REBUILD=0 STOP_DAEMON=0
while [ $# -gt 0 ]; do
    case "$1" in
        --only) ONLY=${2:-}; shift 2 ;;
        --break) BREAK=${2:-}; shift 2 ;;
        --rebuild-bases) REBUILD=1; shift ;;
        --stop-daemon) STOP_DAEMON=1; shift ;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "test-images.sh: error: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
case "$ONLY" in ""|torch|tensorflow) ;; *) echo "test-images.sh: error: --only torch|tensorflow, not '$ONLY'" >&2; exit 2 ;; esac
case "$BREAK" in ""|entrypoint-exits|ssh-passwords) ;;
    *) echo "test-images.sh: error: --break entrypoint-exits|ssh-passwords, not '$BREAK'" >&2; exit 2 ;; esac

WORK=${AMPKIT_IMAGE_TEST_DIR:-/var/tmp/ampkit-test-images}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
RECIPE=r1                      # bump when the stand-in recipe below changes: cached bases are rebuilt
export DOCKER_BUILDKIT=0       # the classic builder: BuildKit would fetch its Dockerfile frontend from Docker Hub
FAILED=() PASSED=0 STARTED_DAEMON=""
declare -A BUILD_S SIZE

say() { echo "test-images: $*"; }
skip() { echo "SKIP: $*"; exit 77; }
ok() { PASSED=$((PASSED + 1)); echo "ok   $1: $2"; }
fail() { FAILED+=("$1: $2"); echo "FAIL $1: $2 — $3"; }
secs() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(secs)" 'BEGIN { printf "%.1f", b - a }'; }

cleanup() {
    if [ -n "$STARTED_DAEMON" ] && [ "$STOP_DAEMON" = 1 ]; then
        say "stopping the dockerd this run started (pid $STARTED_DAEMON); the images stay in /var/lib/docker"
        kill "$STARTED_DAEMON" 2>/dev/null
        for _ in $(seq 60); do kill -0 "$STARTED_DAEMON" 2>/dev/null || break; sleep 0.5; done
    elif [ -n "$STARTED_DAEMON" ]; then
        say "dockerd started by this run is left running (pid $STARTED_DAEMON; stop it with: kill $STARTED_DAEMON)"
    fi
}

# ---------------------------------------------------------------- machine, daemon

[ "$(uname -s)" = Linux ] || skip "Docker images are built on Linux; this is $(uname -s)"
docker_ok() { docker info >/dev/null 2>&1; }
if [ "$(id -u)" != 0 ]; then
    docker_ok || skip "needs root (to start dockerd and debootstrap the stand-in bases), or a running Docker daemon this user may use"
fi
mkdir -p "$WORK" 2>/dev/null || skip "cannot create $WORK (set AMPKIT_IMAGE_TEST_DIR)"
exec 9>"$WORK/lock"
flock -w 3600 9 || skip "another test-images.sh run holds $WORK/lock"
# Everything also goes to a log: last-run.log for a full run (.ci/run prints its summary).
exec > >(tee "$WORK/last-${BREAK:-run}.log") 2>&1

need=()
command -v docker >/dev/null || need+=(docker.io)
PATH="$PATH:/usr/sbin:/sbin" command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || PATH="$PATH:/usr/sbin" command -v debootstrap >/dev/null || need+=(debootstrap)
command -v ssh >/dev/null && command -v ssh-keygen >/dev/null || need+=(openssh-client)
command -v curl >/dev/null || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        say "apt-get install ${need[*]}"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            -o DPkg::Lock::Timeout=300 "${need[@]}"; } >"$WORK/apt.log" 2>&1 \
            || skip "apt-get install ${need[*]} failed (no Debian mirror reachable?): $(tail -1 "$WORK/apt.log")"
    else
        skip "needs ${need[*]} (apt-get install as root)"
    fi
fi
export PATH="$PATH:/usr/sbin:/sbin"

if ! docker_ok; then
    [ "$(id -u)" = 0 ] || skip "no Docker daemon runs, and starting one needs root"
    say "starting dockerd --iptables=false --ip-masq=false --bridge=none (log: $WORK/dockerd.log)"
    # 9>&-: the daemon outlives this run and must not hold its lock
    dockerd --iptables=false --ip-masq=false --bridge=none --pidfile "$WORK/dockerd.pid" >"$WORK/dockerd.log" 2>&1 9>&- &
    STARTED_DAEMON=$!
    trap cleanup EXIT
    for _ in $(seq 120); do docker_ok && break; kill -0 "$STARTED_DAEMON" 2>/dev/null || break; sleep 0.5; done
    docker_ok || skip "dockerd did not start here: $(tail -3 "$WORK/dockerd.log" | tr '\n' ' ')"
fi
say "Docker $(docker version -f '{{.Server.Version}}' 2>/dev/null), storage driver $(docker info -f '{{.Driver}}' 2>/dev/null)"

# ---------------------------------------------------------------- stand-in bases

# The lowest CPython every pin accepts, from the constraints files' headers (docker/lock.sh).
bound() {
    sed -n 's/^# requires-python: >=\([0-9.]*\) .*/\1/p' docker/constraints-torch.txt docker/constraints-tensorflow.txt \
        | sort -V | tail -1
}
pin() { sed -n "s/^$2==//p" "docker/constraints-$1.txt"; }
NEED_PY=$(bound)
[ -n "$NEED_PY" ] || { echo "FAIL lock: docker/constraints-*.txt have no requires-python line — re-run docker/lock.sh"; exit 1; }
TORCH=$(pin torch torch) TORCHVISION=$(pin torch torchvision) TENSORFLOW=$(pin tensorflow tensorflow)

# A CPython 3.11 that is self-contained under its prefix (not Debian's /usr one) and new enough.
find_python() {
    local c v
    for c in ${AMPKIT_STANDIN_PYTHON:-} $(command -v python3.11 python3 2>/dev/null) \
             /root/.pyenv/versions/3.11*/bin/python3.11 /usr/local/bin/python3.11 /opt/python*/bin/python3.11; do
        [ -x "$c" ] || continue
        # its installation, not a virtual environment made from it
        v=$("$c" -c 'import sys; print(sys.base_prefix if sys.base_prefix != "/usr" and sys.version_info[:2] == (3, 11) else "")' 2>/dev/null) || continue
        [ -n "$v" ] && [ -x "$v/bin/python3.11" ] && [ -f "$v/lib/python3.11/os.py" ] || continue
        if [ "$(printf '%s\n%s\n' "$NEED_PY" "$("$c" -c 'import platform; print(platform.python_version())')" | sort -V | head -1)" = "$NEED_PY" ]; then
            echo "$c"; return 0
        fi
    done
    return 1
}

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

build_os_base() {  # build_os_base TAG PYTHON
    local tag=$1 py=$2 prefix rootfs="$WORK/rootfs" t0
    prefix=$("$py" -c 'import sys; print(sys.base_prefix)')
    t0=$(secs)
    say "stand-in OS: debootstrap --variant=minbase $SUITE + CPython $("$py" -V 2>&1 | cut -d' ' -f2) from $prefix"
    rm -rf "$rootfs"
    # The runtime libraries CPython's extension modules link against (ssl, ctypes, sqlite3, ...).
    debootstrap --variant=minbase --include=ca-certificates,libssl3,libffi8,libsqlite3-0,libbz2-1.0,liblzma5,zlib1g,libreadline8,libncursesw6,libgdbm6,libgdbm-compat4,libuuid1,libexpat1 \
        "$SUITE" "$rootfs" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
        || { echo "FAIL stand-in: debootstrap $SUITE from $MIRROR — $(tail -2 "$WORK/debootstrap.log" | tr '\n' ' ')"; return 1; }
    # The interpreter, its shared library and standard library (not its site-packages), under /usr/local.
    tar -C "$prefix" --exclude='./lib/python3.11/site-packages/*' --exclude='./lib/python3.11/test' \
        --exclude='*/__pycache__' --exclude='./lib/python3.11/idlelib' --exclude='./lib/python3.11/tkinter' \
        --exclude='./lib/python3.11/turtledemo' --exclude='./lib/python3.11/config-3.11-*/*.a' \
        -cf - ./bin/python3.11 ./lib/python3.11 ./include $(cd "$prefix" && ls ./lib/libpython3.11.so* 2>/dev/null) \
        | tar -C "$rootfs/usr/local" -xf - || return 1
    mkdir -p "$rootfs/usr/local/share/ampkit-standin"
    # This machine's CA bundle: pip in the builds reaches PyPI through the same network as here.
    cp "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}" "$rootfs/usr/local/share/ampkit-standin/ca-bundle.crt"
    chroot "$rootfs" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
        PIP_CERT=/usr/local/share/ampkit-standin/ca-bundle.crt /bin/sh -ec '
        ldconfig
        cd /usr/local/bin && ln -sf python3.11 python3 && ln -sf python3 python
        python3 -c "import ssl, ctypes, sqlite3, bz2, lzma, zlib, uuid, readline"
        python3 -m ensurepip --default-pip >/dev/null
        python3 -m pip install -q --no-cache-dir --root-user-action=ignore --upgrade pip
        python3 -m compileall -q /usr/local/lib/python3.11 >/dev/null 2>&1 || true
        apt-get clean; rm -rf /var/lib/apt/lists/* /root/.cache' >"$WORK/standin-os.log" 2>&1 \
        || { echo "FAIL stand-in: Python in the stand-in OS — $(tail -3 "$WORK/standin-os.log" | tr '\n' ' ')"; return 1; }
    tar -C "$rootfs" -c . | docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'ENV PIP_CERT=/usr/local/share/ampkit-standin/ca-bundle.crt' \
        --change 'LABEL org.ampkit.standin=os' \
        --change 'CMD ["/bin/bash"]' - "$tag" >/dev/null || return 1
    rm -rf "$rootfs"
    say "stand-in OS $tag built in $(elapsed "$t0") s"
}

build_framework_base() {  # build_framework_base TAG FROM PIP-REQUIREMENT...
    local tag=$1 from=$2 t0 log
    shift 2
    log="$WORK/standin-${tag//[\/:]/-}.log"
    t0=$(secs)
    say "stand-in $tag: FROM $from, pip install $*"
    printf 'FROM %s\nLABEL org.ampkit.standin=framework\nRUN python3 -m pip install --no-cache-dir --root-user-action=ignore %s\n' \
        "$from" "$*" | docker build --network=host --force-rm -q -t "$tag" - >"$log" 2>&1 \
        || { echo "FAIL stand-in: $tag — $(tail -3 "$log" | tr '\n' ' ')"; return 1; }
    say "stand-in $tag built in $(elapsed "$t0") s"
}

PY=$(find_python) || skip "no CPython 3.11 (>= $NEED_PY, which the pins need; Debian $SUITE has 3.11.2) on this machine to put into the stand-in bases: set AMPKIT_STANDIN_PYTHON=/path/to/python3.11"
PYV=$("$PY" -c 'import platform; print(platform.python_version())')
OS_IMAGE=ampkit-standin/os:$SUITE-py$PYV-$RECIPE
TORCH_BASE=ampkit-standin/torch:$TORCH-py$PYV-$RECIPE
TF_BASE=ampkit-standin/tensorflow:$TENSORFLOW-py$PYV-$RECIPE
[ -n "$BREAK" ] && ONLY=torch
FRAMEWORKS=(torch tensorflow)
[ -n "$ONLY" ] && FRAMEWORKS=("$ONLY")

if [ "$REBUILD" = 1 ]; then docker image rm -f "$OS_IMAGE" "$TORCH_BASE" "$TF_BASE" >/dev/null 2>&1; fi
if image_exists "$OS_IMAGE"; then say "stand-in OS $OS_IMAGE: cached"
else
    [ "$(id -u)" = 0 ] || skip "the stand-in bases are not built yet, and debootstrap needs root"
    build_os_base "$OS_IMAGE" "$PY" || exit 1
fi
for fw in "${FRAMEWORKS[@]}"; do
    if [ "$fw" = torch ]; then base=$TORCH_BASE reqs="torch==$TORCH torchvision==$TORCHVISION"
    else base=$TF_BASE reqs="tensorflow==$TENSORFLOW"; fi
    image_exists "$base" && say "stand-in $base: cached" || build_framework_base "$base" "$OS_IMAGE" $reqs || exit 1
done

# ---------------------------------------------------------------- the images

build_image() {  # build_image FRAMEWORK
    local fw=$1 t0 tbase=$OS_IMAGE tfbase=$OS_IMAGE   # the stage a build does not use gets the small OS image
    [ "$fw" = torch ] && tbase=$TORCH_BASE || tfbase=$TF_BASE
    t0=$(secs)
    say "docker build -f docker/Dockerfile --build-arg FRAMEWORK=$fw -t ampkit:$fw . (log: $WORK/build-$fw.log)"
    if docker build --network=host --force-rm -f docker/Dockerfile --build-arg FRAMEWORK="$fw" \
        --build-arg TORCH_IMAGE="$tbase" --build-arg TENSORFLOW_IMAGE="$tfbase" -t "ampkit:$fw" . >"$WORK/build-$fw.log" 2>&1; then
        BUILD_S[$fw]=$(elapsed "$t0")
        ok "ampkit:$fw" "build (${BUILD_S[$fw]} s)"
        # Untagged leftovers: the image this one replaced, and the classic builder's result of the
        # stage this build does not use (on the OS stand-in). Only dangling images with our labels.
        docker image prune -f --filter "label=org.opencontainers.image.title=ampkit-$fw" >/dev/null 2>&1
        docker image prune -f --filter "label=org.ampkit.standin=os" >/dev/null 2>&1
        return 0
    fi
    BUILD_S[$fw]=failed
    fail "ampkit:$fw" "build" "$(grep -E 'error|Error|ERROR' "$WORK/build-$fw.log" | tail -3 | tr '\n' ' ') (log: $WORK/build-$fw.log)"
    tail -20 "$WORK/build-$fw.log" | sed 's/^/    /'
    return 1
}

break_image() {  # break_image KIND -> prints the tag of a broken variant of ampkit:torch
    local kind=$1 tag=ampkit-broken:$1 run
    case "$kind" in
        entrypoint-exits)
            run="printf '#!/bin/sh\\necho \"ampkit-entrypoint: broken on purpose\"\\nexit 0\\n' > /usr/local/bin/ampkit-entrypoint" ;;
        ssh-passwords)
            run="sed -i -e 's/\"PasswordAuthentication no\"/\"PasswordAuthentication yes\"/' -e 's/\"AuthenticationMethods publickey\"/\"AuthenticationMethods any\"/' /usr/local/bin/ampkit-entrypoint && grep -q 'PasswordAuthentication yes' /usr/local/bin/ampkit-entrypoint && echo ampkit:ampkit | chpasswd" ;;
    esac
    printf 'FROM ampkit:torch\nRUN %s\n' "$run" | docker build --network=host --force-rm -q -t "$tag" - >"$WORK/build-broken.log" 2>&1 \
        || { echo "FAIL $tag: build of the broken variant — $(tail -3 "$WORK/build-broken.log" | tr '\n' ' ')" >&2; return 1; }
    echo "$tag"
}

# ---------------------------------------------------------------- the checks, from outside

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
running() { [ "$(docker inspect -f '{{.State.Running}}' "$1" 2>/dev/null)" = true ]; }
logs() { docker logs "$1" 2>&1; }
wait_log() {  # wait_log CONTAINER REGEX SECONDS: 0 when the log matches, 1 when it stops running or time runs out
    local end=$((SECONDS + $3))
    while [ $SECONDS -lt $end ]; do
        logs "$1" | grep -qE "$2" && return 0
        running "$1" || { logs "$1" | grep -qE "$2"; return; }
        sleep 1
    done
    return 1
}
http_status() { curl -s --noproxy '*' -o /dev/null -w '%{http_code}' --max-time 10 "$@"; }

check_notebook() {  # check_notebook CONTAINER IMAGE: the getting-started notebook, run as a user runs it
    local c=$1 img=$2 out
    # The entrypoint put it where JupyterLab opens, owned by ampkit.
    out=$(docker exec "$c" stat -c '%U' /workspace/getting-started.ipynb 2>&1)
    [ "$out" = ampkit ] && ok "$img" "getting-started.ipynb in JupyterLab's folder, owned by ampkit" \
        || fail "$img" "getting-started.ipynb in JupyterLab's folder" "stat says: $out"
    # Executed top to bottom as ampkit in a fresh kernel (nbclient), with the notebook's tiny
    # settings (AMPKIT_NOTEBOOK_QUICK=1), in a scratch folder; any error output fails the check.
    # Lines TensorFlow's C++ runtime writes to stderr (absl logging, or TSL's dated lines in TensorFlow
    # 2.19: "2026-12-01 17:38:41.322378: E external/local_xla/...cc:467] ...") are not errors.
    out=$(docker exec -i -u ampkit -e AMPKIT_NOTEBOOK_QUICK=1 "$c" python3 - <<'PY' 2>&1
import os, re, tempfile, time
import nbclient, nbformat
native = re.compile(r"^([IWEF]\d{4} [\d:. ]+\d+ \S+:\d+\]|\d{4}-\d\d-\d\d [\d:.]+: [IWEF] \S+:\d+\]"
                    r"|WARNING: All log messages before absl|To enable the following instructions|\s+when |$)")
nb = nbformat.read("/workspace/getting-started.ipynb", as_version=4)
work = tempfile.mkdtemp(prefix="ampkit-notebook-")
t0 = time.time()
nbclient.NotebookClient(nb, timeout=1200, kernel_name="python3", allow_errors=True,
                        resources={"metadata": {"path": work}}).execute()
bad = []
for i, cell in enumerate(nb.cells):
    for o in cell.get("outputs", []):
        if o.output_type == "error":
            bad.append(f"cell {i}: {o.ename}: {o.evalue}")
        elif o.output_type == "stream" and o.name == "stderr":
            bad += [f"cell {i} stderr: {line}" for line in o.text.splitlines() if not native.match(line)]
report = os.path.join(work, "ampkit-getting-started", "report.html")
if not os.path.exists(report):
    bad.append("no report.html written")
print("NOTEBOOK-ERRORS: " + " | ".join(bad)[:400] if bad else f"NOTEBOOK-OK {len(nb.cells)} cells in {time.time() - t0:.0f} s")
PY
)
    case "$out" in
        *NOTEBOOK-OK*) ok "$img" "getting-started notebook runs as ampkit without error output (${out##*NOTEBOOK-OK })" ;;
        *) fail "$img" "getting-started notebook runs as ampkit" "$(echo "$out" | grep -E 'NOTEBOOK-ERRORS|Error' | tail -2 | tr '\n' ' ' | cut -c1-400)" ;;
    esac
}

check_container() {  # check_container IMAGE FRAMEWORK
    local img=$1 fw=$2 other c tmp jp sp token uid out st t0 took code health line
    [ "$fw" = torch ] && other=tensorflow || other=torch
    c=ampkit-test-${img//[:\/]/-}
    tmp=$(mktemp -d "$WORK/run.XXXXXX")
    docker rm -f "$c" >/dev/null 2>&1
    ssh-keygen -q -t ed25519 -N '' -C ampkit-test -f "$tmp/key"
    chmod 644 "$tmp/key.pub"
    jp=$(free_port) sp=$(free_port)
    # The host's network (this daemon has no bridge) and loopback only; the image's own healthcheck,
    # asked every 20 s instead of every 10 min so that the test sees its first answer.
    docker run -d --name "$c" --network=host -e AMPKIT_LISTEN=127.0.0.1 -e JUPYTER_PORT="$jp" -e SSH_PORT="$sp" \
        -v "$tmp/key.pub:/keys:ro" -e SSH_AUTHORIZED_KEYS=/keys --health-interval=20s "$img" >/dev/null \
        || { fail "$img" "container starts" "docker run failed"; return; }

    # It starts and keeps running: JupyterLab's URL appears while the container runs.
    if ! wait_log "$c" 'JupyterLab: http://' 240 || ! running "$c"; then
        code=$(docker inspect -f '{{.State.Status}} (exit code {{.State.ExitCode}})' "$c")
        fail "$img" "container keeps running" "it is $code; the log ends: $(logs "$c" | tail -3 | tr '\n' ' ')"
        echo "     (the other checks need a running container: not run)"
        docker rm -f "$c" >/dev/null 2>&1; rm -rf "$tmp"; return
    fi
    ok "$img" "container keeps running"

    line=$(docker image inspect -f '{{index .Config.Labels "org.opencontainers.image.title"}}' "$img")
    [ "$line" = "ampkit-$fw" ] && ok "$img" "label org.opencontainers.image.title=$line" \
        || fail "$img" "label org.opencontainers.image.title" "is '$line', not ampkit-$fw"

    out=$(docker exec "$c" python3 -c "import importlib.util as u, importlib.metadata as m
print(m.version('$fw') if u.find_spec('$fw') else 'MISSING', 'PRESENT' if u.find_spec('$other') else 'absent')" 2>&1)
    case "$out" in
        "MISSING"*) fail "$img" "$fw inside, no $other" "$fw cannot be imported: $out" ;;
        *" absent") ok "$img" "$fw inside ($fw ${out% *}), no $other" ;;
        *) fail "$img" "$fw inside, no $other" "$other is importable in the $fw image" ;;
    esac

    token=$(logs "$c" | sed -n 's/.*JupyterLab: http:\/\/[^ ]*token=\([0-9a-f]*\).*/\1/p' | tail -1)
    st=$(http_status -H "Authorization: token $token" "http://127.0.0.1:$jp/api/status")
    [ -n "$token" ] && [ "$st" = 200 ] && ok "$img" "jupyter answers with the token (HTTP 200)" \
        || fail "$img" "jupyter answers with the token" "HTTP $st with token '${token:0:8}...'"
    st=$(http_status "http://127.0.0.1:$jp/api/status")
    [ "$st" = 403 ] && ok "$img" "jupyter refuses without the token (HTTP 403)" \
        || fail "$img" "jupyter refuses without the token" "HTTP $st"
    uid=$(docker exec "$c" id -u ampkit 2>/dev/null)
    out=$(docker top "$c" -eo pid,uid,args 2>/dev/null | awk '/-m jupyterlab/ {print $2; exit}')
    [ -n "$out" ] && [ "$out" != 0 ] && [ "$out" = "$uid" ] && ok "$img" "jupyter runs as ampkit (uid $out), not root" \
        || fail "$img" "jupyter runs as ampkit, not root" "its uid is '${out:-no jupyterlab process}', ampkit's is '$uid'"

    local sshopts=(-o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectTimeout=10
                   -o LogLevel=ERROR -p "$sp")
    if wait_log "$c" "SSH: port $sp" 60; then
        out=$(ssh "${sshopts[@]}" -i "$tmp/key" ampkit@127.0.0.1 'id -un; ampkit --version' </dev/null 2>&1)
        [ "$(echo "$out" | head -1)" = ampkit ] && echo "$out" | grep -q ampkit \
            && ok "$img" "ssh key login as ampkit (ampkit --version there: $(echo "$out" | tail -1))" \
            || fail "$img" "ssh key login as ampkit" "$(echo "$out" | tail -2 | tr '\n' ' ')"
        out=$(ssh "${sshopts[@]}" -o PubkeyAuthentication=no -o PreferredAuthentications=password,keyboard-interactive \
              ampkit@127.0.0.1 true </dev/null 2>&1)
        line=$(docker exec "$c" sshd -T -f /var/lib/ampkit/sshd_config 2>/dev/null | grep -E '^(passwordauthentication|authenticationmethods) ' | tr '\n' ' ')
        if echo "$out" | grep -q 'Permission denied (publickey)' && [ "$line" = "passwordauthentication no authenticationmethods publickey " ]; then
            ok "$img" "ssh password login refused (the server offers only publickey)"
        else
            fail "$img" "ssh password login refused" "the server answers '$(echo "$out" | tail -1)'; sshd -T: $line"
        fi
        if ssh "${sshopts[@]}" -i "$tmp/key" root@127.0.0.1 true </dev/null >/dev/null 2>&1; then
            fail "$img" "ssh root login refused" "root logged in with the key"
        else
            ok "$img" "ssh root login refused"
        fi
    else
        fail "$img" "ssh key login as ampkit" "no 'SSH: port $sp' line in the log: $(logs "$c" | grep -i ssh | tail -2 | tr '\n' ' ')"
    fi

    if wait_log "$c" 'ampkit doctor: (recommended|could not run|SELF-TEST)' 600 \
        && line=$(logs "$c" | grep -E 'ampkit doctor: (recommended|could not run|SELF-TEST)') \
        && ! echo "$line" | grep -qE 'could not run|SELF-TEST'; then
        ok "$img" "doctor verdict in docker logs: $(echo "$line" | head -1 | cut -c1-110)"
        if docker cp "$c:/var/lib/ampkit/doctor.json" "$tmp/doctor.json" 2>/dev/null \
            && out=$(python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(d["framework"], d["recommended"])' "$tmp/doctor.json") \
            && [ "${out%% *}" = "$fw" ] && echo "$line" | grep -q "recommended ${out#* } "; then
            ok "$img" "doctor.json in the state dir (framework $fw, recommended ${out#* })"
        else
            fail "$img" "doctor.json in the state dir" "missing, unreadable or not this verdict: ${out:-no file}"
        fi
    else
        fail "$img" "doctor verdict in docker logs" "$(logs "$c" | grep 'ampkit doctor' | tail -2 | tr '\n' ' ')"
    fi

    check_notebook "$c" "$img"

    health=""
    for _ in $(seq 120); do
        health=$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{end}}' "$c" 2>/dev/null)
        [ "$health" = healthy ] || [ "$health" = unhealthy ] || ! running "$c" && break
        sleep 5
    done
    [ "$health" = healthy ] && ok "$img" "healthcheck healthy" \
        || fail "$img" "healthcheck healthy" "status '${health:-none}': $(docker inspect -f '{{range .State.Health.Log}}{{.ExitCode}} {{.Output}}{{end}}' "$c" 2>/dev/null | tail -2 | tr '\n' ' ')"

    t0=$(secs)
    docker stop -t 10 "$c" >/dev/null 2>&1
    took=$(elapsed "$t0")
    code=$(docker inspect -f '{{.State.ExitCode}}' "$c")
    if [ "$code" = 0 ] && awk -v t="$took" 'BEGIN { exit !(t < 10) }'; then
        ok "$img" "docker stop within 10 s, exit 0 (${took} s)"
    else
        fail "$img" "docker stop within 10 s, exit 0" "took ${took} s, exit code $code"
    fi
    docker rm -f "$c" >/dev/null 2>&1
    rm -rf "$tmp"
}

T0=$(secs)
if [ -n "$BREAK" ]; then
    image_exists ampkit:torch || build_image torch || exit 1
    broken=$(break_image "$BREAK") || exit 1
    say "checking $broken, ampkit:torch broken on purpose ($BREAK): the checks must fail"
    check_container "$broken" torch
    docker image rm -f "$broken" >/dev/null 2>&1
else
    for fw in "${FRAMEWORKS[@]}"; do
        build_image "$fw" && check_container "ampkit:$fw" "$fw"
    done
    echo
    say "images (stand-in bases: $OS_IMAGE + the framework from PyPI):"
    for fw in "${FRAMEWORKS[@]}"; do
        SIZE[$fw]=$(docker image inspect -f '{{.Size}}' "ampkit:$fw" 2>/dev/null | awk '{ printf "%.2f GB", $1 / 1e9 }')
        printf '  ampkit:%-11s size %-9s build %s s\n' "$fw" "${SIZE[$fw]:-none}" "${BUILD_S[$fw]:-?}"
    done
fi
echo
if [ ${#FAILED[@]} -gt 0 ]; then
    say "${#FAILED[@]} check(s) FAILED, $PASSED passed, in $(elapsed "$T0") s:"
    printf '  FAIL %s\n' "${FAILED[@]}"
    exit 1
fi
say "all $PASSED checks passed in $(elapsed "$T0") s"
exit 0
}
