"""The environment section every report starts with: what a user pastes into a bug report."""

from __future__ import annotations

import platform
import sys

from ._version import __version__
from .cpu import cpu_info


def nvml_gpus() -> list[dict] | None:
    """GPUs as NVML (nvidia-ml-py) sees them, or None when NVML is absent or has no driver."""
    try:
        import pynvml
    except Exception:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        gpus = []
        driver = pynvml.nvmlSystemGetDriverVersion()
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            name = pynvml.nvmlDeviceGetName(h)
            gpus.append({
                "index": i,
                "name": name.decode() if isinstance(name, bytes) else name,
                "memory_total_bytes": int(mem.total),
                "memory_used_bytes": int(mem.used),
                "driver_version": driver.decode() if isinstance(driver, bytes) else driver,
            })
        return gpus
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def base_environment(framework: str, framework_version: str) -> dict:
    """The keys every environment section has, whichever framework ran. The version as a plain str:
    ``torch.__version__`` is a ``TorchVersion``, which a child's pickled report would make its
    parent import torch to read back."""
    return {
        "ampkit": __version__,
        "framework": framework,
        "framework_version": str(framework_version),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cuda_runtime": None,
        "cudnn": None,
        "device": None,
        "device_name": None,
        "compute_capability": None,
        "gpus": [],
        "nvml": None,
        "cpu": dict(cpu_info()),
    }
