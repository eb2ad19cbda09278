"""Processes ampkit owns import TensorFlow and Keras without what a training process never uses.

Importing TensorFlow (which imports Keras) also imports, where installed, scikit-learn for Keras's
estimator wrappers (``keras.wrappers``), matplotlib for ``keras.visualization``, JAX for TFLite's JAX
authoring API and IPython for the Keras file editor's notebook display: about 1.9 s of CPU out of 5.2
on a 2-core machine, paid by every child that measures a Keras mode. In the ``ampkit`` program and
in the children it starts (never in a library caller's process):

* :data:`LAZY`: Keras's public ``wrappers`` and ``visualization`` packages load on first use
  (:class:`importlib.util.LazyLoader`): a factory that builds a ``keras.wrappers.SKLearnClassifier``
  or plots with ``keras.visualization`` gets them whole, scikit-learn and matplotlib imported then;
* :data:`UNUSED`: the optional imports of JAX by TFLite (``tf.lite.experimental.authoring`` on JAX
  functions) and by Keras's Orbax callback (a ``jax.monitoring`` shim), and of IPython by the Keras
  file editor (its display in a notebook, which these processes never are), are told the package
  is absent, while it is not yet imported: each importer takes that as not installed.

Every other importer -- the user's code, Keras's JAX backend, ampkit's own plots -- imports each
package as usual. ``AMPKIT_LEAN_IMPORTS=0`` turns both off.
"""

from __future__ import annotations

import importlib.util
import os
import sys

#: modules whose execution waits for their first use (their parents bind them at import, nothing more)
LAZY = frozenset({
    "keras.wrappers", "keras._tf_keras.keras.wrappers",  # -> keras.src.wrappers -> scikit-learn
    "keras.visualization", "keras._tf_keras.keras.visualization", "keras.src.visualization",  # -> matplotlib
})

#: a package -> the modules (prefixes ending in ".", or whole names) whose optional import of it is refused
UNUSED = {
    "jax": ("tensorflow.lite.",  # TFLite's JAX model authoring (tf.lite.experimental.authoring)
            "keras.src.callbacks.orbax_checkpoint"),  # a jax.monitoring shim for Orbax checkpoints
    "IPython": ("keras.src.saving.file_editor",),  # KerasFileEditor's display in a notebook
}

#: the import system's own frames, skipped to find the module that imports
_IMPORT_MACHINERY = frozenset({"importlib", "importlib._bootstrap", "importlib._bootstrap_external",
                               "_frozen_importlib", "_frozen_importlib_external"})
_ENV = "AMPKIT_LEAN_IMPORTS"


def _refused(importer: str, prefixes: tuple[str, ...]) -> bool:
    return any(importer.startswith(p) if p.endswith(".") else importer == p for p in prefixes)


def _importer() -> str:
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__", "") in _IMPORT_MACHINERY:
        frame = frame.f_back
    return frame.f_globals.get("__name__", "") if frame is not None else ""


class SkipUnused:
    """A meta path finder: :data:`LAZY`'s modules load on first use, :data:`UNUSED`'s imports are refused;
    every other import goes on untouched."""

    def find_spec(self, name, path=None, target=None):
        if name in LAZY:
            return self._lazy(name, path, target)
        top = name.partition(".")[0]
        prefixes = UNUSED.get(top)
        if prefixes is None or top in sys.modules:
            return None
        importer = _importer()
        if _refused(importer, prefixes):
            raise ModuleNotFoundError(f"No module named {name!r} (not imported by ampkit's processes for "
                                      f"{importer}; see ampkit.lean_imports)", name=name)
        return None

    def _lazy(self, name, path, target):
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = importlib.util.LazyLoader(spec.loader)
                return spec
        return None


def _installed() -> bool:
    return any(type(f).__name__ == SkipUnused.__name__ and type(f).__module__ == __name__ for f in sys.meta_path)


def skip_unused_imports() -> None:
    """In a process ampkit owns (the program, its children): :class:`SkipUnused` first on the meta path,
    unless ``AMPKIT_LEAN_IMPORTS=0``. Idempotent."""
    if os.environ.get(_ENV, "").strip() != "0" and not _installed():
        sys.meta_path.insert(0, SkipUnused())
