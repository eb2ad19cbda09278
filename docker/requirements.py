"""Print the requirements of ampkit with the given extras, one per line, without ampkit itself.

    python3 requirements.py pyproject.toml torch,models,data,images

The image installs these (pinned by the constraints file) in a layer of their own, before it
copies ampkit's source: a change to the code then rebuilds only the small layer that installs
ampkit, not the few hundred MB of dependencies. Self-references such as "ampkit[torch]" inside
an extra are followed. Standard library only (tomllib, Python 3.11+): it runs on the bare base.
"""

from __future__ import annotations

import re
import sys

import tomllib

SELF = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*\[([^\]]*)\]\s*$")


def requirements(project: dict, extras: list[str]) -> list[str]:
    name = project["name"].lower()
    optional = project.get("optional-dependencies", {})
    out: list[str] = list(project.get("dependencies", []))
    seen: set[str] = set()
    todo = list(extras)
    while todo:
        extra = todo.pop(0)
        if extra in seen:
            continue
        if extra not in optional:
            raise SystemExit(f"requirements.py: pyproject.toml has no extra {extra!r} "
                             f"(it has {', '.join(sorted(optional))})")
        seen.add(extra)
        for req in optional[extra]:
            m = SELF.match(req)
            if m and m.group(1).lower().replace("_", "-") == name:
                todo.extend(e.strip() for e in m.group(2).split(",") if e.strip())
            else:
                out.append(req)
    return list(dict.fromkeys(out))


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: requirements.py PYPROJECT EXTRA[,EXTRA...]", file=sys.stderr)
        return 2
    with open(argv[1], "rb") as f:
        project = tomllib.load(f)["project"]
    print("\n".join(requirements(project, [e for e in argv[2].split(",") if e])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
