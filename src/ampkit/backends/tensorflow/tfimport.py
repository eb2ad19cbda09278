"""Importing TensorFlow quietly: the one place that does it (every module here asks this one)."""

from __future__ import annotations

import os


def import_tensorflow():
    """Import TensorFlow with its C++ logs off (cuInit noise on CPU machines), unless the user set the level."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    return tf
