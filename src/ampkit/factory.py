"""``--model MODULE:FACTORY`` (or ``PATH/TO/FILE.py:FACTORY``) and ``--input-shape``: importing and calling a
user's factory."""

from __future__ import annotations

import importlib
import os
import re
import sys
import time

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


#: an import that takes longer than this is named in one line (it runs again in every mode's process)
SLOW_IMPORT_S = 3.0
def split_spec(spec, flag: str = "--model") -> tuple[str, str]:
    """``MODULE:FACTORY`` or ``PATH/TO/FILE.py:FACTORY`` -> (module or path, factory); a usage line
    for anything else."""
    if isinstance(spec, str) and spec.count(":") >= 1:
        where, _, attr = spec.rpartition(":")
        if where and attr and (spec.count(":") == 1 or is_path(where)):
            return where, attr
    raise UsageError(f"{flag} must look like MODULE:FACTORY or PATH/TO/FILE.py:FACTORY (e.g. mymodels:build or "
                     f"./train.py:Net); received {spec!r}")


def is_path(where: str) -> bool:
    """A file path rather than a module name: it ends in .py or holds a path separator."""
    return where.endswith(".py") or "/" in where or os.sep in where


def load_factory(spec: str, flag: str = "--model"):
    """Import MODULE (the current directory is on the import path) or the file PATH/TO/FILE.py (its
    folder on the import path, for its own imports) and return its FACTORY; ``flag`` names the option
    in the messages (``--model``, ``--data``). The module is imported once per process; an import
    slower than :data:`SLOW_IMPORT_S` is named in one line, once for the whole run."""
    where, attr = split_spec(spec, flag)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    _import_frameworks_of(where)  # their import time is not the user's module's (a torch import alone can take seconds)
    t0 = time.perf_counter()
    try:
        module = _import_file(where, spec, flag) if is_path(where) else importlib.import_module(where)
    except UsageError:
        raise
    except ModuleNotFoundError as exc:
        raise UsageError(_not_found(where, spec, flag, exc))
    except Exception as exc:
        raise UsageError(f"cannot import module {where!r} for {flag} {spec}: {type(exc).__name__}: {exc}")
    except SystemExit as exc:  # at import, in the caller's process: it would end it silently
        raise UsageError(f"cannot import module {where!r} for {flag} {spec}: it called sys.exit({exc.code!r})") \
            from None
    _note_slow_import(module, where, spec, flag, time.perf_counter() - t0)
    factory = module
    for part in attr.split("."):
        if not hasattr(factory, part):
            raise UsageError(_no_attribute(module, where, attr, part, spec, flag))
        factory = getattr(factory, part)
    if not callable(factory):
        raise UsageError(f"{spec} is a {type(factory).__name__}, not a callable factory")
    return factory


def _import_file(where: str, spec: str, flag: str):
    """PATH/TO/FILE.py as a module named after the file, imported once per process (sys.modules)."""
    import importlib.util

    path = os.path.abspath(os.path.expanduser(where))
    if not path.endswith(".py"):
        path = path + ".py" if os.path.isfile(path + ".py") else path
    if not os.path.isfile(path):
        raise UsageError(f"{flag} {spec}: no file {where!r} (looked for {path}, from the folder {os.getcwd()})")
    name = os.path.splitext(os.path.basename(path))[0]
    loaded = sys.modules.get(name)
    if loaded is not None and os.path.abspath(getattr(loaded, "__file__", "") or "") == path:
        return loaded
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # the file's own imports of its neighbours
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # as `import name` would: pickling and a second load find it
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _not_found(where: str, spec: str, flag: str, exc: ModuleNotFoundError) -> str:
    top = where.split(".")[0]
    if exc.name and exc.name != top and not where.startswith(exc.name + "."):
        return (f"cannot import module {where!r} for {flag} {spec}: it imports {exc.name!r}, which is not installed "
                f"here ({type(exc).__name__}: {exc})")
    return missing_module_line(where, spec, flag)


def missing_module_line(where: str, spec: str, flag: str) -> str:
    """The one line for a module that is nowhere: where ampkit looked, a file of that name a folder
    or two below (the PATH/TO/FILE.py form), or how to put a folder on the path."""
    top = where.split(".")[0]
    attr = spec.rpartition(":")[2]
    found = _files_named(top + ".py")
    hint = (f"; there is {found[0]}: {flag} {found[0]}:{attr}" if found else
            f"; a file elsewhere: {flag} path/to/{top}.py:{attr}, or put its folder on the path: "
            f"PYTHONPATH=path/to/folder ampkit ...")
    return (f"cannot import module {where!r} for {flag} {spec}: ModuleNotFoundError: No module named {top!r} (looked "
            f"in the current folder {os.getcwd()} and on sys.path){hint}")


def _files_named(filename: str, depth: int = 2, limit: int = 2000) -> list[str]:
    """./sub/FILE.py and ./sub/sub/FILE.py below the current folder (a few thousand entries at most)."""
    out, seen = [], 0
    for root, dirs, files in os.walk("."):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")) and d not in ("node_modules", "site-packages"))
        if root.count(os.sep) >= depth:
            dirs[:] = []
        seen += len(files)
        if filename in files and root != ".":
            out.append(os.path.join(root, filename))
        if seen > limit:
            break
    return out


def _no_attribute(module, where: str, attr: str, part: str, spec: str, flag: str) -> str:
    from .suggest import did_you_mean

    own = sorted(n for n, v in vars(module).items() if not n.startswith("_") and callable(v)
                 and getattr(v, "__module__", None) == module.__name__)
    listed = f"its callables: {', '.join(own[:20])}" if own else "it defines no function or class"
    return f"module {where!r} has no attribute {attr!r} (from {flag} {spec}); {did_you_mean(part, own)}{listed}"


_FRAMEWORKS = re.compile(r"^\s*(?:import|from)\s+(torch|tensorflow|keras|tf_keras|jax)\b", re.M)


def _import_frameworks_of(where: str) -> None:
    """Import the frameworks the user's module imports at its top (read from its source, not run), so that
    the slow-import line times the user's own code; any doubt leaves the module to import them itself."""
    try:
        if is_path(where):
            origin = where
        else:
            import importlib.util

            found = importlib.util.find_spec(where) if "." not in where else None
            origin = found.origin if found else None
        if not origin or not str(origin).endswith(".py"):
            return
        with open(origin, encoding="utf-8", errors="replace") as f:
            names = dict.fromkeys(_FRAMEWORKS.findall(f.read(200_000)))
        for name in names:
            if name not in sys.modules:
                importlib.import_module(name)
    except Exception:  # the real import below says what is wrong
        return


def _note_slow_import(module, where: str, spec: str, flag: str, seconds: float) -> None:
    """Name a slow import in one line on stderr, once per run (:func:`ampkit.isolation.say_once`)."""
    if seconds < SLOW_IMPORT_S:
        return
    from .isolation import say_once

    say_once(f"slow-import {os.path.abspath(getattr(module, '__file__', None) or where)}",
             f"ampkit: importing {where} (for {flag} {spec}) took {seconds:.1f} s, and it runs again in every mode's "
             "process: code at import (training, downloads, data loading) belongs under "
             "`if __name__ == \"__main__\":`")

def check_findable(spec: str | None, flag: str = "--model") -> None:
    """Before anything heavy is imported: a ``MODULE:FACTORY`` whose module cannot be found is the
    one line :func:`load_factory` gives, without importing it, a framework or a child process (a
    mistyped module name is known in a fraction of a second, not after torch loads: issue #49).
    A module that is found is left to :func:`load_factory` (importing it runs the user's code)."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")) or is_path(spec.split(":")[0]):
        return  # load_factory says what a spec must look like, and checks a file path
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
        raise UsageError(missing_module_line(module_name, spec, flag))


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

