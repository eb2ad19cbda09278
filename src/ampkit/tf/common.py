"""Importing TensorFlow quietly, and its environment section."""

from __future__ import annotations

import os
import platform
import sys

from .._version import __version__
from ..devices import cpu_info


def import_tf():
    """Import TensorFlow with its C++ logs off (cuInit noise on CPU machines), unless the user set the level."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    return tf


def tf_environment() -> dict:
    tf = import_tf()
    import keras

    build = dict(tf.sysconfig.get_build_info())
    gpus = []
    for i, gpu in enumerate(tf.config.list_physical_devices("GPU")):
        details = tf.config.experimental.get_device_details(gpu)
        cc = details.get("compute_capability")
        gpus.append({"index": i, "name": details.get("device_name", gpu.name),
                     "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None})
    return {
        "ampkit": __version__,
        "framework": "tensorflow",
        "framework_version": tf.__version__,
        "keras_version": keras.__version__,
        "keras_backend": keras.backend.backend(),
        "tf_build": {k: (v if isinstance(v, (str, bool, int, float, list)) else str(v)) for k, v in build.items()},
        "cuda_runtime": build.get("cuda_version"),
        "cudnn": build.get("cudnn_version"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "device": "GPU:0" if gpus else "CPU:0",
        "device_name": gpus[0]["name"] if gpus else cpu_info()["model"],
        "compute_capability": gpus[0]["compute_capability"] if gpus else None,
        "gpus": gpus,
        "cpu": cpu_info(),
    }


def tf_device_name() -> str:
    tf = import_tf()
    return "GPU:0" if tf.config.list_physical_devices("GPU") else "CPU:0"
