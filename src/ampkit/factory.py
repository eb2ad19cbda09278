"""``--model MODULE:FACTORY`` and ``--input-shape``: importing and calling a user's factory.

Framework-neutral: what the factory returns is checked by the backend that asked for it.
"""

from __future__ import annotations

import importlib
import os
import sys

from .errors import UsageError, one_line


def parse_shape(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        dims = tuple(int(p) for p in text.split(","))
    except ValueError:
        raise UsageError(f"--input-shape must be comma-separated positive integers like 3,32,32; received {text!r}")
    if not dims or any(d <= 0 for d in dims):
        raise UsageError(f"--input-shape must be comma-separated positive integers like 3,32,32; received {text!r}")
    return dims


def load_factory(spec: str, flag: str = "--model"):
    """Import MODULE and return its FACTORY (the current directory is on the import path); ``flag``
    names the option in the messages (``--model``, parity's ``--data``)."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise UsageError(f"{flag} must look like MODULE:FACTORY (e.g. mymodels:build); received {spec!r}")
    module_name, attr = spec.split(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise UsageError(f"cannot import module {module_name!r} for {flag} {spec}: {type(exc).__name__}: {exc}")
    except SystemExit as exc:  # at import, in the caller's process: it would end it silently
        raise UsageError(f"cannot import module {module_name!r} for {flag} {spec}: it called sys.exit({exc.code!r})") \
            from None
    factory = module
    for part in attr.split("."):
        if not hasattr(factory, part):
            raise UsageError(f"module {module_name!r} has no attribute {attr!r} (from {flag} {spec})")
        factory = getattr(factory, part)
    if not callable(factory):
        raise UsageError(f"{spec} is a {type(factory).__name__}, not a callable factory")
    return factory


def check_findable(spec: str | None, flag: str = "--model") -> None:
    """Before anything heavy is imported: a ``MODULE:FACTORY`` whose module cannot be found is the
    one line :func:`load_factory` gives, without importing it, a framework or a child process (a
    mistyped module name is known in a fraction of a second, not after torch loads: issue #49).
    A module that is found is left to :func:`load_factory` (importing it runs the user's code)."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        return  # load_factory says what a spec must look like
    import importlib.util

    module_name = spec.split(":")[0]
    top = module_name.split(".")[0]  # only the top: finding a submodule would import (run) its package
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found = importlib.util.find_spec(top) is not None
    except Exception:  # an odd finder or name: load_factory reports it where the module is imported
        return
    if not found:
        raise UsageError(f"cannot import module {module_name!r} for {flag} {spec}: ModuleNotFoundError: "
                         f"No module named {top!r}")


#: what no framework's model factory returns: a usage line before any framework loads (issue #49)
NOT_A_MODEL = (str, bytes, int, float, bool, type(None), list, dict, tuple, set)


def plain_value_returned(obj) -> bool:
    """A plain Python value (a string, a number, None, a container): never a model or a Workload."""
    return isinstance(obj, NOT_A_MODEL)


class FactoryFailed(UsageError):
    """A user's factory failed when called (raised, or called ``sys.exit``, or raised KeyboardInterrupt
    itself): one line naming it. A run that calls it can record it as that run's failure."""


def call_user(factory, spec: str):
    """Call a user's (already loaded) factory: a usage error it raises passes through, any other
    failure -- an exception, ``sys.exit()``, a KeyboardInterrupt the factory raised itself (not the
    user's Ctrl-C, which :mod:`ampkit.signals` records) -- is one :class:`FactoryFailed` line naming
    ``spec``."""
    from . import signals

    try:
        return factory()
    except UsageError:
        raise
    except SystemExit as exc:  # in ampkit's own process it would end ampkit silently, with its code
        raise FactoryFailed(f"calling {spec}() failed: it called sys.exit({exc.code!r})") from None
    except KeyboardInterrupt:
        if signals.interrupted_by_signal():
            raise
        raise FactoryFailed(f"calling {spec}() failed: it raised KeyboardInterrupt (not a Ctrl-C)") from None
    except Exception as exc:
        raise FactoryFailed(f"calling {spec}() failed: {one_line(exc)}") from None


def call_factory(spec: str):
    """Import MODULE:FACTORY and call it (:func:`call_user`); any failure is a usage error naming the spec."""
    return call_user(load_factory(spec), spec)


def class_count_hint(text: str, num_classes: int | None, outputs: int | None = None) -> str:
    """What to change when a user's model failed on targets beyond its outputs (torch's "Target 7 is
    out of bounds", Keras's "label value of 9 which is outside the valid range of [0, 4)"): the
    ``--num-classes`` to pass ("" when ``text`` is another failure). ``outputs``: the model's
    outputs per sample, where the caller could see them."""
    import re

    m = re.search(r"valid range of \[0, ?(\d+)\)", text)
    if m:
        outputs = int(m.group(1))
    elif not re.search(r"Target -?\d+ is out of bounds", text):
        return ""
    asked = f"--num-classes {num_classes}" if num_classes else "--num-classes 10 (the default)"
    if outputs:
        return f"; the model has {outputs} outputs per sample but the targets use {asked}: pass --num-classes {outputs}"
    return f"; the targets use {asked}, more classes than the model outputs: pass --num-classes with its number of outputs"

