"""The envelope of every JSON document ampkit writes, and the checks its readers run."""

from __future__ import annotations

import json
import os
from dataclasses import fields

from ._version import __version__
from .errors import UsageError

COMMANDS = ("doctor", "bench", "parity", "audit", "plan")
#: refuse anything larger: ampkit's own documents are kilobytes (an audit of a big model: a few MB)
MAX_BYTES = 256 * 1024 * 1024

NUM = (int, float)
OPT_NUM = (int, float, type(None))
OPT_BOOL = (bool, type(None))
_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true/false", dict: "an object",
               list: "a list", type(None): "null"}


class DocumentError(ValueError):
    """What is wrong inside one document, in one line (a reader that knows the file adds its name)."""


class Enveloped:
    """What the reports of bench, parity and audit share: the environment section, written by the
    backend that ran, is the one place that names the framework."""

    environment: dict

    @property
    def framework(self) -> str | None:
        return self.environment.get("framework")


def envelope(command: str, environment: dict, **body) -> dict:
    """The document of ``command``: the header every document carries, then ``body`` in its order."""
    return {"ampkit_version": __version__, "command": command, "environment": environment, **body}


def open_envelope(doc) -> str:
    """Check the header of a parsed document; returns its command. A ``doctor --framework all``
    document keeps its environments in its parts, so only it may go without ``environment``."""
    if not isinstance(doc, dict):
        raise DocumentError(f"the top level is a JSON {_json_kind(doc)}, not an object")
    if "command" not in doc or "ampkit_version" not in doc:
        raise DocumentError("it has no 'command'/'ampkit_version' keys, so it was not written by ampkit")
    command = doc["command"]
    if command not in COMMANDS:
        raise DocumentError(f"'command' is {command!r}; ampkit report reads {', '.join(COMMANDS)}")
    if "environment" in doc and not isinstance(doc["environment"], dict):
        raise DocumentError("'environment' should be an object")
    if "environment" not in doc and not (command == "doctor" and "frameworks" in doc):
        raise DocumentError("lacks the key 'environment'")
    return command


def check(obj, schema: dict, where: str = "", choices: dict | None = None) -> dict:
    """``obj`` is an object holding every key of ``schema`` (key -> type or tuple of types), each of
    its type, and each key of ``choices`` holds one of its words; returns ``obj``. ``where``: the
    object's place in the document ("results[2]"), for the message."""
    if not isinstance(obj, dict):
        raise DocumentError(f"{where or 'the document'} should be an object, found {type(obj).__name__}")
    missing = [k for k in schema if k not in obj]
    if missing:
        raise DocumentError(f"{where + ' ' if where else ''}lacks the key{'s' if len(missing) > 1 else ''} "
                            f"{', '.join(repr(k) for k in missing)}")
    for key, expected in schema.items():
        label = f"{where}.{key}" if where else repr(key)
        _check_type(obj[key], expected, label)
        allowed = (choices or {}).get(key)
        if allowed and obj[key] not in allowed:
            raise DocumentError(f"{label} is {obj[key]!r}, expected one of {', '.join(allowed)}")
    return obj


def check_rows(rows: list, schema: dict, where: str, choices: dict | None = None) -> None:
    for i, row in enumerate(rows):
        check(row, schema, f"{where}[{i}]", choices)


def known(cls, d: dict) -> dict:
    """The keys of ``d`` that are fields of the dataclass ``cls`` (a newer document's extra keys are left out)."""
    return {f.name: d[f.name] for f in fields(cls) if f.name in d}


def where_in(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _check_type(value, expected, where: str) -> None:
    types = expected if isinstance(expected, tuple) else (expected,)
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        names = [_TYPE_NAMES.get(t, t.__name__) for t in types if not (t is int and float in types)]
        raise DocumentError(f"{where} should be {' or '.join(dict.fromkeys(names))}, found {json.dumps(value)[:40]}")


def _json_kind(value) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean",
            type(None): "null"}.get(type(value), type(value).__name__)


# ---------------------------------------------------------------- reading a document's file
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


def read_json(path: str):
    """The parsed JSON of one document's file; every problem is one :class:`~ampkit.errors.UsageError`
    that names the file (a plan file too: it is run, not reported)."""
    doc = _parse(path, _read_text(path))
    if isinstance(doc, dict) and doc.get("kind") == "ampkit-plan":  # a plan file, not a result document
        raise UsageError(f"{path}: a precision plan (what to keep in float32), not a result document; run it with "
                         "'ampkit bench|parity --plan PATH', or pass the document 'ampkit plan --json PATH' wrote")
    return doc


def not_a_document(path: str, exc: DocumentError) -> UsageError:
    return UsageError(f"{path}: not an ampkit document: {exc}; pass files written by "
                      f"'ampkit doctor|bench|parity|audit --json PATH'")
