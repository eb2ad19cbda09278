"""Framework backends behind one small interface (:class:`~ampkit.backends.base.Backend`).

Each backend is a folder (``torch/``, ``tensorflow/``) holding everything that imports its
framework. The registry that chooses one is :mod:`ampkit.registry`; its names answer here too
(``ampkit.backends.get_backend``), loaded on first use, so that a backend's protocol
(``ampkit.backends.base``) is imported without the registry.
"""


def __getattr__(name: str):
    from .. import registry

    if name == "Backend":
        from .base import Backend

        return Backend
    if name in registry.__all__:
        return getattr(registry, name)
    raise AttributeError(f"module 'ampkit.backends' has no attribute {name!r}")
