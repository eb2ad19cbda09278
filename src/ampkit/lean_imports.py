"""Processes ampkit owns import TensorFlow and Keras without their imports for features training never uses.

Importing TensorFlow (which imports Keras) also imports, where installed, JAX for TFLite's JAX
authoring API, scikit-learn for Keras's estimator wrappers, matplotlib for ``keras.visualization``
and IPython for the Keras file editor's notebook display: about 2.5 s of CPU out of 6.5 on a 2-core
machine, paid by every child that measures a Keras mode. Each of those imports is optional in its
importer (``try: import ...; except ImportError``), so in the ``ampkit`` program and in the children
it starts (never in a library caller's process) those importers are told the package is absent.

Only the listed importers are refused, only while the package is not yet imported: the user's own
code, Keras's JAX backend (``KERAS_BACKEND=jax``) and ampkit itself import every one of them as usual.
"""

from __future__ import annotations

import sys

#: a package -> the modules (prefixes ending in ".", or whole names) whose optional import of it is refused
UNUSED = {
    "jax": ("tensorflow.lite.",  # TFLite's JAX model authoring (tf.lite.experimental.authoring)
            "keras.src.callbacks.orbax_checkpoint"),  # a jax.monitoring shim for Orbax checkpoints
    "sklearn": ("keras.src.wrappers.",),  # keras.wrappers.SKLearnClassifier & co
    "matplotlib": ("keras.src.visualization.",),  # keras.visualization's image galleries
    "IPython": ("keras.src.saving.file_editor",),  # KerasFileEditor's display in a notebook
}

_IMPORT_MACHINERY = ("importlib", "_frozen_importlib")


def _refused(importer: str, prefixes: tuple[str, ...]) -> bool:
    return any(importer.startswith(p) if p.endswith(".") else importer == p for p in prefixes)


class SkipUnused:
    """A meta path finder that refuses :data:`UNUSED`'s imports; every other import goes on."""

    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        prefixes = UNUSED.get(top)
        if prefixes is None or top in sys.modules:
            return None
        frame = sys._getframe(1)
        while frame is not None and frame.f_globals.get("__name__", "").startswith(_IMPORT_MACHINERY):
            frame = frame.f_back
        importer = frame.f_globals.get("__name__", "") if frame is not None else ""
        if _refused(importer, prefixes):
            raise ModuleNotFoundError(f"No module named {name!r} (not imported by ampkit's processes for "
                                      f"{importer}; see ampkit.lean_imports)", name=name)
        return None


def skip_unused_imports() -> None:
    """In a process ampkit owns (the program, its children): refuse :data:`UNUSED`'s imports. Idempotent."""
    if not any(isinstance(f, SkipUnused) for f in sys.meta_path):
        sys.meta_path.insert(0, SkipUnused())
