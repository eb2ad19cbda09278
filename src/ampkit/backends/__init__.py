"""Framework backends behind one small interface (:class:`~ampkit.backends.base.Backend`).

Each backend is a folder (``torch/``, ``tensorflow/``) holding everything that imports its
framework. The registry that chooses one is :mod:`ampkit.registry` (below every backend: it loads
one by its ``"module:Class"`` spec), so importing a backend's protocol (``ampkit.backends.base``)
imports no registry.
"""
