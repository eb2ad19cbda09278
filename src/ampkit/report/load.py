"""Reading the JSON documents that doctor, bench, parity and audit write, with schema checks.

Every problem is a :class:`~ampkit.errors.UsageError` that names the file and what is wrong
with it, so the command line prints one line and exits 2. The checks cover the keys the
contract promises (and their types), nothing more: documents may carry extra keys, and keys a
newer ampkit adds (``speedup_ci``, ``repeats``, ...) pass through untouched.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field

from ..errors import UsageError

COMMANDS = ("doctor", "bench", "parity", "audit")
VERDICTS = ("recommended", "usable", "slower", "unsupported", "broken")
SELFTESTS = ("pass", "fail", "skip")
STATUSES = ("ok", "unsupported", "oom", "error")
PARITY_VERDICTS = ("baseline", "pass", "fail")
FINDING_KINDS = ("overflow", "underflow", "nonfinite", "precision")
#: refuse anything larger: ampkit's own documents are kilobytes (an audit of a big model: a few MB)
MAX_BYTES = 256 * 1024 * 1024

_NUM = (int, float)
_OPT_NUM = (int, float, type(None))
_OPT_STR = (str, type(None))
_OPT_BOOL = (bool, type(None))
_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true/false", dict: "an object",
               list: "a list", type(None): "null"}

# command -> {key: expected type(s)}; nested rows are checked by _ROW_SCHEMAS
_SCHEMAS = {
    "doctor": {"framework": str, "device": str, "modes": dict, "recommended": str, "reason": str},
    "bench": {"workload": str, "device": str, "results": list},
    "parity": {"dataset": str, "results": list},
    "audit": {"mode": str, "loss_scale": _NUM, "layers": list, "first_nonfinite": (dict, type(None)),
              "findings": list},
}
_MODE_SCHEMA = {"supported": bool, "accelerated": _OPT_BOOL, "speedup": _OPT_NUM, "selftest": str, "verdict": str}
_ROW_SCHEMAS = {
    "bench": {"mode": str, "status": str, "samples_per_s": _OPT_NUM, "peak_memory_bytes": _OPT_NUM,
              "max_batch_size": _OPT_NUM, "speedup_vs_fp32": _OPT_NUM},
    "parity": {"mode": str, "metric": dict, "final_loss": dict, "delta_vs_fp32": _OPT_NUM, "p_value": _OPT_NUM,
               "verdict": str},
    "audit_layer": {"name": str, "type": str, "fwd_amax": _OPT_NUM, "fwd_headroom_log2": _OPT_NUM,
                    "fwd_underflow_frac": _OPT_NUM, "fwd_nonfinite": _OPT_NUM, "grad_underflow_frac": _OPT_NUM,
                    "grad_nonfinite": _OPT_NUM},
    "audit_finding": {"layer": str, "kind": str, "advice": str},
}
_CHOICES = {("doctor_mode", "verdict"): VERDICTS, ("doctor_mode", "selftest"): SELFTESTS,
            ("bench", "status"): STATUSES, ("parity", "verdict"): PARITY_VERDICTS,
            ("audit_finding", "kind"): FINDING_KINDS}


@dataclass
class Document:
    """One command's JSON document (a ``--framework all`` doctor document yields one per framework)."""

    path: str
    command: str
    data: dict
    environment: dict = field(default_factory=dict)
    interrupted: bool = False
    part: str | None = None  # "torch" / "tensorflow" for a part of a --framework all doctor document

    @property
    def label(self) -> str:
        name = os.path.basename(self.path)
        return f"{name} [{self.part}]" if self.part else name

    @property
    def framework(self) -> str:
        # the environment first: it is written by the framework's own code (an early TF audit said "torch")
        return str(self.environment.get("framework") or self.data.get("framework") or "torch")


class _Bad(Exception):
    """A schema problem inside one document; :func:`load` adds the file name."""


def _type_name(t) -> str:
    ts = t if isinstance(t, tuple) else (t,)
    names = [_TYPE_NAMES.get(x, x.__name__) for x in ts if not (x is int and float in ts)]
    return " or ".join(dict.fromkeys(names))


def _check_type(value, expected, where: str) -> None:
    ok = isinstance(value, expected) and not (isinstance(value, bool) and bool not in
                                              (expected if isinstance(expected, tuple) else (expected,)))
    if not ok:
        raise _Bad(f"{where} should be {_type_name(expected)}, found {json.dumps(value)[:40]}")


def _check_keys(obj, schema: dict, where: str, kind: str) -> None:
    if not isinstance(obj, dict):
        raise _Bad(f"{where or 'the document'} should be an object, found {type(obj).__name__}")
    missing = [k for k in schema if k not in obj]
    if missing:
        raise _Bad(f"{where + ' ' if where else ''}lacks the key{'s' if len(missing) > 1 else ''} "
                   f"{', '.join(repr(k) for k in missing)}")
    for key, expected in schema.items():
        _check_type(obj[key], expected, f"{where}.{key}" if where else repr(key))
        choices = _CHOICES.get((kind, key))
        if choices and obj[key] not in choices:
            raise _Bad(f"{where}.{key} is {obj[key]!r}, expected one of {', '.join(choices)}")


def check_document(doc) -> str:
    """Validate one parsed document in place; returns its command. Raises _Bad."""
    if not isinstance(doc, dict):
        raise _Bad(f"the top level is a JSON {_json_kind(doc)}, not an object")
    if "command" not in doc or "ampkit_version" not in doc:
        raise _Bad("it has no 'command'/'ampkit_version' keys, so it was not written by ampkit")
    command = doc["command"]
    if command not in COMMANDS:
        raise _Bad(f"'command' is {command!r}; ampkit report reads {', '.join(COMMANDS)}")
    if "environment" in doc and not isinstance(doc["environment"], dict):
        raise _Bad("'environment' should be an object")
    if command == "doctor" and "frameworks" in doc:  # --framework all
        parts = doc["frameworks"]
        if not isinstance(parts, dict) or not parts:
            raise _Bad("'frameworks' should be an object of framework -> doctor document")
        for name, part in parts.items():
            try:
                _check_doctor(part, f"frameworks.{name}")
            except _Bad as exc:
                raise _Bad(str(exc)) from None
        return command
    if "environment" not in doc:
        raise _Bad("lacks the key 'environment'")
    {"doctor": _check_doctor, "bench": _check_bench, "parity": _check_parity, "audit": _check_audit}[command](doc, "")
    return command


def _check_doctor(doc, where: str) -> None:
    _check_keys(doc, _SCHEMAS["doctor"], where, "doctor")
    for mode, m in doc["modes"].items():
        _check_keys(m, _MODE_SCHEMA, f"{where + '.' if where else ''}modes.{mode}", "doctor_mode")


def _check_rows(rows: list, kind: str, where: str) -> None:
    for i, row in enumerate(rows):
        _check_keys(row, _ROW_SCHEMAS[kind], f"{where}[{i}]", kind)


def _check_bench(doc, where: str) -> None:
    _check_keys(doc, _SCHEMAS["bench"], where, "bench")
    _check_rows(doc["results"], "bench", "results")


def _check_parity(doc, where: str) -> None:
    _check_keys(doc, _SCHEMAS["parity"], where, "parity")
    _check_rows(doc["results"], "parity", "results")


def _check_audit(doc, where: str) -> None:
    _check_keys(doc, _SCHEMAS["audit"], where, "audit")
    _check_rows(doc["layers"], "audit_layer", "layers")
    _check_rows(doc["findings"], "audit_finding", "findings")
    first = doc["first_nonfinite"]
    if first is not None:
        _check_keys(first, {"name": str, "phase": str}, "first_nonfinite", "audit_first")


def _json_kind(value) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean",
            type(None): "null"}.get(type(value), type(value).__name__)


def _read_text(path: str) -> str:
    if not os.path.exists(path):
        raise UsageError(f"{path}: no such file; pass JSON files written by 'ampkit doctor|bench|parity|audit --json PATH'")
    if os.path.isdir(path):
        raise UsageError(f"{path}: is a directory, not a JSON document; pass the .json files in it instead")
    try:
        size = os.path.getsize(path)
        if size > MAX_BYTES:
            raise UsageError(f"{path}: {size} bytes is too large for an ampkit document (limit {MAX_BYTES})")
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror or exc}); check the path and its permissions")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not a JSON document (not UTF-8 text); pass a file written with --json PATH")


def _unclosed(text: str) -> bool:
    """Whether ``text`` ends inside a string or with brackets still open: a document cut off."""
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
    return in_string or depth > 0


def _parse(path: str, text: str):
    if not text.strip():
        raise UsageError(f"{path}: the file is empty; re-run the command that writes it with --json PATH")

    try:  # NaN/Infinity (not JSON, but Python writes them) are accepted and shown as "—"
        return json.loads(text)
    except json.JSONDecodeError as exc:
        body = text.strip()
        if body[:1] in "{[" and _unclosed(body):
            raise UsageError(f"{path}: truncated JSON (the text ends at line {exc.lineno} before the document "
                             f"is complete); the writer was cut off: re-run it with --json PATH") from None
        raise UsageError(f"{path}: not a JSON document ({exc.msg} at line {exc.lineno} column {exc.colno}); "
                         f"pass a file written with --json PATH") from None
    except RecursionError:
        raise UsageError(f"{path}: not an ampkit document (nested too deeply)") from None


def load(path: str) -> list[Document]:
    """One file -> its documents (two for a ``--framework all`` doctor document)."""
    doc = _parse(path, _read_text(path))
    try:
        command = check_document(doc)
    except _Bad as exc:
        raise UsageError(f"{path}: not an ampkit document: {exc}; pass files written by "
                         f"'ampkit doctor|bench|parity|audit --json PATH'") from None
    env = doc.get("environment") or {}
    if command == "doctor" and "frameworks" in doc:
        out = []
        for name, part in doc["frameworks"].items():
            part_env = part.get("environment") if isinstance(part.get("environment"), dict) else None
            out.append(Document(path, "doctor", part, part_env or env, bool(part.get("interrupted")), part=name))
        return out
    return [Document(path, command, doc, env, bool(doc.get("interrupted")))]


def load_all(paths: list[str]) -> list[Document]:
    """Every file in order; the first bad one stops the run (exit 2, naming it)."""
    if not paths:
        raise UsageError("no documents given: pass one or more JSON files written by "
                         "'ampkit doctor|bench|parity|audit --json PATH'")
    docs: list[Document] = []
    seen: set[str] = set()
    for path in paths:
        key = os.path.realpath(path)
        if key in seen:
            continue
        seen.add(key)
        docs.extend(load(path))
    return docs


def finite(x) -> float | None:
    """A number that can be drawn or printed, else None (JSON null, bools and non-numbers too)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None
