"""The precision plan format (framework-neutral; no framework imported): the engines read it, `ampkit plan` (``ampkit.plan``) writes it."""

from __future__ import annotations

import fnmatch
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from .errors import UsageError
from .precision import MODES, parse_mode

__all__ = ["KIND", "VERSION", "MODULE_MODES", "Plan", "load_plan", "pattern_matches"]

KIND = "ampkit-plan"
VERSION = 1
#: what a module entry may say: fp32 everywhere; bf16 (out of fp8, in the bf16 region) under fp8
MODULE_MODES = ("fp32", "bf16")
_FRAMEWORKS = {"torch": "torch", "pytorch": "torch", "tensorflow": "tensorflow", "keras": "tensorflow",
               "tf": "tensorflow"}
_GLOB = set("*?[")


def pattern_matches(pattern: str, name: str, class_name: str | None = None) -> bool:
    """Whether ``pattern`` (a qualified name, a glob over names, or a class name) names this module."""
    if pattern == name or (class_name is not None and pattern == class_name):
        return True
    return bool(_GLOB & set(pattern)) and fnmatch.fnmatchcase(name, pattern)


@dataclass
class Plan:
    """A checked precision plan (see docs/internals.md). Build one with :func:`load_plan`."""

    default: str
    modules: dict[str, str] = field(default_factory=dict)
    framework: str | None = None
    evidence: dict = field(default_factory=dict)
    source: str | None = None   # the file it was read from (not serialised)

    @property
    def label(self) -> str:
        """How a bench row / parity result names it: ``plan:<default>``."""
        return f"plan:{self.default}"

    @property
    def keep_fp32(self) -> list[str]:
        return [p for p, m in self.modules.items() if m == "fp32"]

    @property
    def islands(self) -> int:
        return len(self.modules)

    def to_dict(self) -> dict:
        return {"kind": KIND, "version": VERSION, "framework": self.framework, "default": self.default,
                "modules": dict(self.modules), "evidence": dict(self.evidence)}

    def save(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.to_dict(), fh, indent=2, default=str)
            fh.write("\n")

    def _where(self, pattern: str) -> str:
        return f"plan{f' {self.source}' if self.source else ''}: entry {pattern!r}"

    def check_framework(self, framework: str) -> None:
        """Refuse a plan written for the other framework's model."""
        if self.framework is not None and self.framework != framework:
            raise UsageError(f"plan{f' {self.source}' if self.source else ''} is for framework {self.framework!r}, "
                             f"not {framework!r}: its module names are another model's; write one for this model "
                             "(ampkit audit --plan PATH)")

    def mode_of(self, name: str, class_name: str | None = None) -> tuple[str, str] | None:
        """``(mode, pattern)`` of the first entry naming this module, or None."""
        for pattern, mode in self.modules.items():
            if pattern_matches(pattern, name, class_name):
                return mode, pattern
        return None

    def resolve(self, named: Iterable[tuple[str, str]]) -> dict[str, tuple[str, str]]:
        """``{module name: (mode, pattern)}`` over ``(name, class name)`` pairs of a model. An entry
        matching no module raises one line naming it (and a few of the names there are)."""
        named = [(n, c) for n, c in named if n]  # the root is the default's business, not an island
        out, used = {}, set()
        for name, cls in named:
            hit = self.mode_of(name, cls)
            if hit is not None:
                out[name] = hit
                used.add(hit[1])
        for pattern in self.modules:
            if pattern not in used:
                # an entry shadowed by an earlier one still counts when it would match
                if any(pattern_matches(pattern, n, c) for n, c in named):
                    continue
                sample = ", ".join(n for n, _ in named[:6]) + (", ..." if len(named) > 6 else "")
                raise UsageError(f"{self._where(pattern)} matches no module of this model "
                                 f"(a qualified name, a glob over names, or a class name; names here: {sample or 'none'})")
        return out

    def outermost(self, resolved: dict[str, tuple[str, str]], mode: str = "fp32") -> list[str]:
        """The resolved modules in ``mode`` that no other such module contains (islands are applied
        once, at their outermost module)."""
        names = [n for n, (m, _) in resolved.items() if m == mode]
        return [n for n in names if not any(n.startswith(o + ".") for o in names if o != n)]


def _mode(value, where: str, allowed: tuple[str, ...]) -> str:
    try:
        mode = parse_mode(value) if isinstance(value, str) else None
    except UsageError:
        mode = None
    if mode not in allowed:
        raise UsageError(f"{where}: unknown or unsupported mode {value!r}; allowed here: {', '.join(allowed)}")
    return mode


def _read(source) -> tuple[dict, str | None]:
    if isinstance(source, dict):
        return source, None
    if not isinstance(source, (str, os.PathLike)):
        raise UsageError(f"a plan is a path to its JSON file or a dict; received {type(source).__name__}")
    path = os.fspath(source)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise UsageError(f"plan {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"plan {path}: cannot read it ({exc})") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"plan {path}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise UsageError(f"plan {path}: a plan is a JSON object with \"kind\": \"{KIND}\"; found {type(data).__name__}")
    return data, path


def load_plan(source, framework: str | None = None) -> Plan:
    """A checked :class:`Plan` from a path, a dict or a Plan; ``framework`` refuses the other one's.

    Raises:
        UsageError: one line naming what is wrong (the file, the key, or the entry).
    """
    if isinstance(source, Plan):
        plan = source
    else:
        data, path = _read(source)
        where = f"plan {path}" if path else "plan"
        if data.get("kind") != KIND:
            raise UsageError(f"{where}: \"kind\" must be {KIND!r}; found {data.get('kind')!r}")
        if data.get("version") != VERSION:
            raise UsageError(f"{where}: \"version\" {data.get('version')!r} is not one this ampkit reads ({VERSION})")
        fw = data.get("framework")
        if fw is not None and (not isinstance(fw, str) or fw.strip().lower() not in _FRAMEWORKS):
            raise UsageError(f"{where}: \"framework\" must be torch, tensorflow or null; found {fw!r}")
        default = _mode(data.get("default"), f"{where}: \"default\"", MODES)
        modules = data.get("modules", {})
        if not isinstance(modules, dict):
            raise UsageError(f"{where}: \"modules\" must map patterns to modes; found {type(modules).__name__}")
        evidence = data.get("evidence", {})
        plan = Plan(default, {}, _FRAMEWORKS[fw.strip().lower()] if fw else None,
                    evidence if isinstance(evidence, dict) else {"note": evidence}, path)
        allowed = ("fp32", "bf16") if default == "fp8" else ("fp32",)
        for pattern, mode in modules.items():
            if not isinstance(pattern, str) or not pattern.strip():
                raise UsageError(f"{where}: entry {pattern!r}: a pattern is a module name, a glob or a class name")
            plan.modules[pattern.strip()] = _mode(mode, plan._where(pattern), allowed)
    if framework is not None:
        plan.check_framework(framework)
    return plan


def keep_fp32_plan(mode: str, keep_fp32, framework: str, what: str = "module") -> Plan | None:
    """The plan of an engine's ``MixedPrecision(mode, keep_fp32=...)`` (both frameworks): None without
    islands; a :class:`Plan` or its dict (``from_plan``) is checked for ``framework``; a list of
    patterns (``what`` names, globs or class names) keeps each in fp32 under ``mode``."""
    if keep_fp32 is None:
        return None
    if isinstance(keep_fp32, (Plan, dict)):
        return load_plan(keep_fp32, framework)
    if isinstance(keep_fp32, str) or not all(isinstance(p, str) and p.strip() for p in keep_fp32):
        raise UsageError(f"keep_fp32 takes a list of {what} names, globs or class names; received {keep_fp32!r}")
    return load_plan({"kind": KIND, "version": VERSION, "framework": framework, "default": mode,
                      "modules": {p.strip(): "fp32" for p in keep_fp32}})
