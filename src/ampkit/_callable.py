"""Command packages that are also the library function of the same name."""

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
