"""Which modes Keras runs here and what ``auto`` means: on TensorFlow (its GPUs, the doctor's
measured verdict) and, through :mod:`.engine.keras_backends`, on Keras's torch and JAX backends."""

from __future__ import annotations

from ...capability import gpu_shortfall, resolve_mode
from ...cpu import auto_for_gpu, cpu_capability_choice, cpu_mode_support
from ...precision import TRAINING_MODES, get_precision
from .tfimport import import_tensorflow


def _tensorflow():
    return import_tensorflow()


def gpu_capabilities() -> list[tuple[int, int]]:
    tf = _tensorflow()
    caps = []
    for gpu in tf.config.list_physical_devices("GPU"):
        cc = tf.config.experimental.get_device_details(gpu).get("compute_capability")
        if cc:
            caps.append(tuple(cc))
    return caps


def fp8_hardware() -> tuple[bool, str]:
    """Whether the first GPU TensorFlow sees has fp8 matmuls (compute capability >= 8.9): the hardware answer."""
    caps = gpu_capabilities()
    if not caps:
        return False, "TensorFlow sees no GPU"
    major, minor = caps[0]
    if (major, minor) >= (8, 9):
        return True, f"GPU with compute capability {major}.{minor} has fp8 matmuls"
    return False, f"GPU with compute capability {major}.{minor} has no fp8 matmuls (needs >= 8.9)"


def mode_support(mode: str) -> tuple[bool, str]:
    """Whether TensorFlow here can run ``mode`` (first GPU if any, else the CPU)."""
    if mode == "fp8":  # the hardware's answer; training in fp8 (Keras float8 layers): .engine.fp8.fp8_support
        return fp8_hardware()
    caps = gpu_capabilities()
    if not caps:
        answer = cpu_mode_support(mode, f"Keras {get_precision(mode).keras_policy} policy on the CPU:")
        return answer if answer is not None else (False, f"unknown mode {mode!r}")
    major, minor = caps[0]
    if mode not in TRAINING_MODES:
        return False, f"unknown mode {mode!r}"
    short = gpu_shortfall(mode, (major, minor), "this GPU")
    if short is not None:
        return False, short
    has = f" has {mode}" if mode in ("tf32", "bf16") else ""
    return True, f"GPU with compute capability {major}.{minor}{has}"


def _first_gpu() -> tuple[tuple[int, int], str] | None:
    """(compute capability, name) of the first GPU TensorFlow sees, None without one."""
    tf = _tensorflow()
    for gpu in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(gpu)
        if details.get("compute_capability"):
            return tuple(details["compute_capability"]), details.get("device_name") or "the first GPU"
    return None


def auto_fingerprint(cpu: bool = False) -> dict:
    """The environment a measured ``auto`` verdict holds for (:mod:`ampkit.auto_cache`): TensorFlow and
    its version, the device it runs on (the first GPU by name and capability, else the CPU), the CPU
    and its features. ``cpu``: the CPU even where a GPU is visible (``--device cpu``)."""
    from ... import auto_cache

    tf = _tensorflow()
    gpu = None if cpu else _first_gpu()
    if gpu is None:
        return auto_cache.fingerprint("tensorflow", tf.__version__, "cpu")
    (major, minor), name = gpu
    return auto_cache.fingerprint("tensorflow", tf.__version__, f"{name} (compute capability {major}.{minor})",
                                  cuda=dict(tf.sysconfig.get_build_info()).get("cuda_version"))


def resolve_auto(cpu: bool = False) -> tuple[str, str]:
    """``auto`` for Keras here, from a measurement wherever one exists (:mod:`ampkit.auto`): the
    TensorFlow doctor's cached verdict for this environment; else, on the CPU, a quick fp32-vs-bf16
    matmul check (cached for next time); else (a GPU nobody measured) the capability rule, labelled
    as a guess. ``cpu``: resolve for the CPU even where TensorFlow sees a GPU."""
    from ...auto import resolve

    gpu = None if cpu else _first_gpu()
    fp = auto_fingerprint(cpu=cpu)
    if gpu is not None:
        (major, minor), name = gpu
        return resolve(fp, name, lambda: auto_for_gpu(major, minor, name))

    def measure():
        from .doctor_ops import quick_auto

        return quick_auto(on_cpu=True)
    return resolve(fp, "this CPU", cpu_capability_choice, measure)


def engine_mode(mode: str, backend: str) -> tuple[str, str]:
    """``MixedPrecision``'s mode and why, on Keras's ``backend`` (TensorFlow: its own checks; torch/JAX:
    :mod:`.engine.keras_backends`, which import no TensorFlow)."""
    if backend == "tensorflow":
        return resolve_mode(mode, mode_support, resolve_auto, "in TensorFlow here",
                            "fp8 is reported by doctor only; use bf16 or fp16")
    from .engine import keras_backends

    return resolve_mode(mode, lambda m: keras_backends.mode_support(m, backend),
                        lambda: keras_backends.resolve_auto(backend), f"on Keras's {backend} backend here",
                        "fp8 is reported by doctor only; use bf16 or fp16")
