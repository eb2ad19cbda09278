"""TensorFlow's environment section and its memory setting (and import_tensorflow, re-exported)."""

from __future__ import annotations

import os

from ...environment import base_environment
from .tfimport import import_tensorflow

__all__ = ["import_tensorflow", "grow_gpu_memory", "tf_environment", "tf_device_name"]


def grow_gpu_memory() -> None:
    """Let TensorFlow take GPU memory as it needs it instead of all of it at its first op.

    For processes that only look (the bench parent validating a workload, doctor's environment):
    without it, the parent would hold the GPU's memory while each mode's child measures.
    Must run before TensorFlow touches a GPU; later it is a no-op.
    """
    tf = import_tensorflow()
    for gpu in tf.config.list_physical_devices("GPU"):
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:  # already initialised: too late to change, nothing to do
            pass


def tf_environment(keras_ran=None) -> dict:
    """TensorFlow's environment section. ``keras_ran``: the Flavor that ran (Keras 3 by default),
    reported as ``"keras"``; also which Keras ``tf.keras`` resolves to and the tf_keras installed."""
    from .flavor import keras3, tf_keras_target, tf_keras_version

    tf = import_tensorflow()
    import keras

    env = base_environment("tensorflow", tf.__version__)
    target = tf_keras_target()
    build = dict(tf.sysconfig.get_build_info())
    gpus = []
    for i, gpu in enumerate(tf.config.list_physical_devices("GPU")):
        details = tf.config.experimental.get_device_details(gpu)
        cc = details.get("compute_capability")
        gpus.append({"index": i, "name": details.get("device_name", gpu.name),
                     "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None})
    env.update({
        "keras_version": keras.__version__,
        "keras_backend": keras.backend.backend(),
        "keras": (keras_ran or keras3()).label,                # the Keras this run used
        "tf_keras_version": tf_keras_version(),                # Keras 2 (tf_keras), None when not installed
        "tf_keras_resolves_to": target,                        # the package tf.keras is: keras or tf_keras
        "keras_flavour": "tf_keras" if target.startswith("tf_keras") else "keras3",
        "tf_use_legacy_keras": os.environ.get("TF_USE_LEGACY_KERAS"),
        "tf_build": {k: (v if isinstance(v, (str, bool, int, float, list)) else str(v)) for k, v in build.items()},
        "cuda_runtime": build.get("cuda_version"),
        "cudnn": build.get("cudnn_version"),
        "device": "GPU:0" if gpus else "CPU:0",
        "device_name": gpus[0]["name"] if gpus else env["cpu"]["model"],
        "compute_capability": gpus[0]["compute_capability"] if gpus else None,
        "gpus": gpus,
        # TensorFlow's thread pools (0: its default, every core); the doctor program times on one (doctor.py)
        "tf_threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                       "inter_op": tf.config.threading.get_inter_op_parallelism_threads()},
    })
    if env["tf_threads"]["intra_op"]:  # set (the doctor's --threads, bench's children): the count timed with
        env["cpu"] = {**env.get("cpu", {}), "threads": env["tf_threads"]["intra_op"]}
    return env


def tf_device_name() -> str:
    tf = import_tensorflow()
    return "GPU:0" if tf.config.list_physical_devices("GPU") else "CPU:0"


class TensorFlowEnvironment:
    """:class:`ampkit.backends.base.EnvironmentOps` for TensorFlow/Keras. TensorFlow places ops
    itself: ``--device`` auto, cpu (GPUs hidden from this process) or cuda[:0] (its GPU:0)."""

    name = "tensorflow"

    def target(self, device: str):
        from ...errors import UsageError
        from ...target import Target

        text = (device or "auto").strip().lower()
        if text not in ("auto", "cpu", "cuda", "cuda:0", "gpu"):
            raise UsageError(f"--framework tensorflow supports --device auto, cpu or cuda (GPU:0); received {device!r}")
        tf = import_tensorflow()
        if text == "cpu":
            tf.config.set_visible_devices([], "GPU")
        gpu = text != "cpu" and bool(tf.config.list_physical_devices("GPU"))
        if text in ("cuda", "cuda:0", "gpu") and not gpu:
            raise UsageError(f"device {device!r} asked for, but TensorFlow sees no GPU; use --device cpu")
        label = "GPU:0" if gpu else "CPU:0"
        return Target(device=label, accelerator=gpu, label=label)

    def environment(self, target) -> dict:
        return tf_environment()

    def mode_support(self, mode: str, target) -> tuple[bool, str]:
        from .devices import mode_support

        return mode_support(mode)

    def training_support(self, mode: str, target) -> tuple[bool, bool, str]:
        if mode == "fp8":  # Keras 3's float8 layers; emulated without fp8 hardware (engine/fp8.py)
            from .engine.fp8 import fp8_support

            return fp8_support()
        ok, why = self.mode_support(mode, target)
        return ok, False, why

    def resolve_auto(self, target) -> tuple[str, str]:
        from .devices import resolve_auto

        return resolve_auto(cpu=not target.accelerator)

    def default_workload(self, target) -> str:
        return "resnet50" if target.accelerator else "mlp"

    def check_workload(self, name: str) -> str:
        from .workloads import check_builtin

        return check_builtin(name)
