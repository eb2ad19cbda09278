"""Stop an image build whose base Python cannot install the pins.

    python3 check-python.py CONSTRAINTS [NAME]

docker/lock.sh writes into each constraints file the lowest CPython every pin accepts, from the
pins' own Requires-Python, and the pin that sets it:

    # requires-python: >=3.11.5 (lowest CPython 3.11 every pin accepts; set by: soupsieve==4.1.3 (...))

This checks the running interpreter against that line: the same minor version the pins were
resolved for (their wheels are built for it) and at least that patch release. Without the check
pip fails later with a bare "(constraint) soupsieve==4.1.3" conflict, or, with an old pip,
backtracks for many minutes. Standard library only: it runs on the bare base image.
Exit 0 when the Python fits, 1 with one line naming the pin when it does not, 2 on a bad file.
"""

from __future__ import annotations

import re
import sys

HEADER = re.compile(r"^# requires-python: >=(\d+)\.(\d+)\.(\d+) \((.*)\)\s*$", re.MULTILINE)


def check(text: str, name: str, version: tuple[int, int, int], where: str) -> tuple[int, str]:
    m = HEADER.search(text)
    if m is None:
        return 2, (f"{name} has no '# requires-python: >=X.Y.Z (...)' line; regenerate it with "
                   "bash docker/lock.sh")
    need = tuple(int(m.group(i)) for i in (1, 2, 3))
    why = m.group(4).split("set by: ", 1)[-1]
    have = ".".join(map(str, version))
    want = ".".join(map(str, need))
    if version[:2] != need[:2]:
        return 1, (f"{name} is resolved for CPython {need[0]}.{need[1]} (its wheels are built for it); "
                   f"this base has Python {have} ({where}). Use a base with CPython {need[0]}.{need[1]}, "
                   "or change the tags and re-lock (docker/lock.sh)")
    if version < need:
        return 1, (f"{name} needs Python >={want}, set by {why}; this base has Python {have} ({where}). "
                   f"Use a base with CPython {want} or newer, or re-lock (docker/lock.sh)")
    return 0, f"{name}: Python {have} ({where}) satisfies every pin (>={want}, set by {why})"


def main(argv: list[str]) -> int:
    if not 2 <= len(argv) <= 3:
        print("usage: check-python.py CONSTRAINTS [NAME]", file=sys.stderr)
        return 2
    path = argv[1]
    name = argv[2] if len(argv) == 3 else path
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        print(f"check-python: cannot read {path}: {e.strerror}", file=sys.stderr)
        return 2
    rc, msg = check(text, name, tuple(sys.version_info[:3]), sys.executable)
    print(("" if rc == 0 else "check-python: error: ") + msg, file=sys.stderr if rc else sys.stdout)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
