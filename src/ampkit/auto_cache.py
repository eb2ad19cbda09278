"""Where ``auto`` remembers what was measured: one small JSON file per user, keyed on the environment.

``ampkit doctor`` (when it measured) and the quick check that ``auto`` runs when nothing is cached
write their verdict here; ``MixedPrecision("auto")``, ``ampkit.keras.MixedPrecision("auto")``,
``bench --modes auto``, ``parity`` and ``audit --mode auto`` read it, so that ``auto`` follows the
measurement on this machine instead of a capability table.

* Location: ``$AMPKIT_CACHE_DIR/auto.json``, else ``$XDG_CACHE_HOME/ampkit/auto.json``, else
  ``~/.cache/ampkit/auto.json``. Tests point ``AMPKIT_CACHE_DIR`` at a scratch folder.
* Keyed on an environment *fingerprint* (:func:`fingerprint`): the framework and its version, the
  device, the CPU model, its logical CPU count and its low-precision ISA features. An entry is used
  only when its stored fingerprint equals the current one, so a cache copied from another machine,
  or left from another torch version, is ignored. The thread count is not part of it: an entry
  records the count it was measured at (``threads``; :mod:`ampkit.threads`), and ``auto`` follows
  it at any count, saying so in its reason where the count differs (:func:`ampkit.auto.choose`).
* Plain JSON, never pickle; written to a temporary file in the same folder and renamed over the old
  one (atomic on POSIX and Windows). A missing, unreadable, corrupt or foreign file is treated as
  "nothing cached": reading never raises, writing failures are swallowed (``store`` returns None).

This module imports no framework.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from .cpu import cpu_features, cpu_info
from .precision import TRAINING_MODES

ENV_VAR = "AMPKIT_CACHE_DIR"
FILE_NAME = "auto.json"
SCHEMA = 1
#: entries kept in the file (the oldest go first): one per framework version and device seen
MAX_ENTRIES = 32
SOURCES = ("doctor", "quick")


def cache_dir() -> Path:
    explicit = os.environ.get(ENV_VAR)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "ampkit"


def cache_path() -> Path:
    return cache_dir() / FILE_NAME


def fingerprint(framework: str, framework_version: str, device: str, **extra) -> dict:
    """What a measured verdict depends on. ``device``: ``"cpu"`` or the GPU's name and capability;
    ``extra``: more that matters for the device (the CUDA version for a GPU)."""
    info = cpu_info()
    fp = {"framework": framework, "framework_version": str(framework_version), "device": str(device),
          "cpu_model": info.get("model"), "machine": info.get("machine"), "logical_cpus": info.get("logical_cpus"),
          "cpu_features": cpu_features(info)}
    fp.update({k: v for k, v in extra.items() if v is not None})
    return fp


def key(fp: dict) -> str:
    return hashlib.sha256(json.dumps(fp, sort_keys=True, default=str).encode()).hexdigest()[:16]


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _read(path: Path) -> dict:
    """The file's entries, or {} for anything that is not a well-formed cache document."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("entries"), dict):
        return {}
    return doc["entries"]


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x and abs(x) != float("inf")


def _valid_ci(ci) -> bool:
    return ci is None or (isinstance(ci, list) and len(ci) == 2 and all(_finite(v) and v > 0 for v in ci))


def valid_entry(entry) -> bool:
    """The shape :func:`load` accepts: a training mode, a source, a date and well-typed measurements."""
    if not isinstance(entry, dict) or not isinstance(entry.get("fingerprint"), dict):
        return False
    if entry.get("recommended") not in TRAINING_MODES or entry.get("source") not in SOURCES:
        return False
    if not isinstance(entry.get("measured_at"), str) or not isinstance(entry.get("reason", ""), str):
        return False
    threads = entry.get("threads")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        return False
    modes = entry.get("modes", {})
    if not isinstance(modes, dict):
        return False
    for m in modes.values():
        if not isinstance(m, dict):
            return False
        for k in ("speedup", "training_speedup"):
            if m.get(k) is not None and not (_finite(m[k]) and m[k] > 0):
                return False
        if not (_valid_ci(m.get("speedup_ci")) and _valid_ci(m.get("training_speedup_ci"))):
            return False
    return True


def load(fp: dict) -> dict | None:
    """The cached entry for exactly this fingerprint, or None (nothing cached, a corrupt file, an
    entry written for another environment). Never raises."""
    try:
        entry = _read(cache_path()).get(key(fp))
    except Exception:  # noqa: BLE001 - a cache must never break a run
        return None
    if not valid_entry(entry) or entry["fingerprint"] != json.loads(json.dumps(fp, default=str)):
        return None
    return entry


def store(fp: dict, entry: dict) -> Path | None:
    """Write ``entry`` for ``fp`` (atomically); the file's path, or None when it could not be written."""
    entry = dict(entry, fingerprint=fp)
    entry.setdefault("measured_at", now_iso())
    if not valid_entry(entry):
        return None
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        entries = {k: v for k, v in _read(path).items() if valid_entry(v)}
        entries[key(fp)] = entry
        if len(entries) > MAX_ENTRIES:
            keep = sorted(entries, key=lambda k: entries[k]["measured_at"])[-MAX_ENTRIES:]
            entries = {k: entries[k] for k in keep}
        text = json.dumps({"schema": SCHEMA, "entries": entries}, indent=1, sort_keys=True, default=str)
        fd, tmp = tempfile.mkstemp(prefix=".auto-", suffix=".json.tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text + "\n")
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except Exception:  # noqa: BLE001 - read-only home, full disk: auto still works, it just measures again
        return None
    return path

