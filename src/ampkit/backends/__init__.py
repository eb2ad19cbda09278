"""Framework backends behind one small interface, chosen in one place.

Each backend exposes the same methods (doctor, bench, parity, audit); TensorFlow is imported
only when its backend is asked for, so ``import ampkit`` and ``ampkit --help`` work without it.
"""

from __future__ import annotations

import importlib.util

from ..errors import UsageError

FRAMEWORKS = ("torch", "tensorflow")
TF_INSTALL = "pip install 'ampkit[tensorflow]'"


def parse_framework(name: str, *, allow_all: bool = False) -> str:
    key = (name or "").strip().lower()
    aliases = {"torch": "torch", "pytorch": "torch", "tensorflow": "tensorflow", "tf": "tensorflow", "keras": "tensorflow"}
    if allow_all and key == "all":
        return "all"
    if key not in aliases:
        allowed = ", ".join(FRAMEWORKS + (("all",) if allow_all else ()))
        raise UsageError(f"unknown framework {name!r}; choose from: {allowed}")
    return aliases[key]


def get_backend(framework: str):
    framework = parse_framework(framework)
    if framework == "torch":
        from .torch_backend import TorchBackend

        return TorchBackend()
    if importlib.util.find_spec("tensorflow") is None or importlib.util.find_spec("keras") is None:
        raise UsageError(f"--framework tensorflow needs TensorFlow and Keras 3: {TF_INSTALL}")
    from .tensorflow_backend import TensorFlowBackend

    return TensorFlowBackend()
