"""Command packages that are also the library function of the same name.

``ampkit.audit`` and ``ampkit.parity`` are both a package (what the command shares between
frameworks) and the public function users call. A module cannot be called, so the package's
module object is given a subclass of ModuleType whose ``__call__`` forwards to the function —
the documented way to customise a module (Python's "Customizing module attribute access").
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable


def make_callable(module_name: str, function: Callable) -> None:
    class _CallableModule(types.ModuleType):
        def __call__(self, *args, **kwargs):
            return function(*args, **kwargs)

    sys.modules[module_name].__class__ = _CallableModule
