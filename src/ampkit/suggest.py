"""The nearest of a few names to a mistyped one: ``--workload resnet5`` -> "did you mean 'resnet50'?"."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def nearest(name: object, choices: Iterable[str]) -> str | None:
    """The choice closest to ``name`` (case-insensitive), or None when none is close."""
    if not isinstance(name, str) or not name.strip():
        return None
    pool = {c.lower(): c for c in choices}
    key = name.strip().lower()
    found = difflib.get_close_matches(key, list(pool), n=1, cutoff=0.6)
    if not found:  # a prefix of one name alone ("resn", "gpt"): that name
        starts = [c for c in pool if c.startswith(key) or key.startswith(c)]
        found = starts if len(starts) == 1 else []
    return pool[found[0]] if found else None


def did_you_mean(name: object, choices: Iterable[str]) -> str:
    """"did you mean 'resnet50'? " or "" (to put before the list of choices)."""
    best = nearest(name, choices)
    return f"did you mean {best!r}? " if best is not None else ""
