"""Command packages that are also the library function of the same name.

``ampkit.audit`` and ``ampkit.parity`` are both a package (what the command shares between
frameworks) and the public function users call. A module cannot be called, so the package's
module object is given a subclass of ModuleType whose ``__call__`` forwards to the function —
the documented way to customise a module (Python's "Customizing module attribute access").
Its public types (``__all__``) load from the package's own modules on first use, so that
importing its protocol (``ampkit.audit.ops``) stays light.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable


def make_callable(module_name: str, function: Callable, types_in: tuple[str, ...] = ()) -> None:
    class _CallableModule(types.ModuleType):
        def __call__(self, *args, **kwargs):
            return function(*args, **kwargs)

        def __getattr__(self, name: str):
            if name in self.__all__:  # (a submodule's name is not: ``from . import config`` asks here first)
                for sub in types_in:
                    found = vars(importlib.import_module(f"{module_name}.{sub}")).get(name)
                    if found is not None:
                        return found
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")

    sys.modules[module_name].__class__ = _CallableModule
