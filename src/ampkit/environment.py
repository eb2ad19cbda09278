"""The environment section of every report: what a user pastes into a bug report."""

from __future__ import annotations

import platform
import sys

from ._version import __version__
from .devices import cpu_info


def _nvml_gpus() -> list[dict] | None:
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


def torch_environment(device=None) -> dict:
    import torch

    build = "rocm" if getattr(torch.version, "hip", None) else ("cuda" if torch.version.cuda else "cpu")
    env = {
        "ampkit": __version__,
        "framework": "torch",
        "framework_version": torch.__version__,
        "torch_build": build,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cuda_runtime": torch.version.cuda,
        "cudnn": None,
        "cuda_available": torch.cuda.is_available(),
        "device": str(device) if device is not None else None,
        "device_name": None,
        "compute_capability": None,
        "gpus": [],
        "nvml": None,
        "cpu": cpu_info(),
    }
    try:
        if torch.backends.cudnn.is_available():
            env["cudnn"] = torch.backends.cudnn.version()
    except Exception:
        pass
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            env["gpus"].append({
                "index": i,
                "name": props.name,
                "compute_capability": f"{props.major}.{props.minor}",
                "memory_total_bytes": int(props.total_memory),
                "multiprocessors": props.multi_processor_count,
            })
        env["nvml"] = _nvml_gpus()
        if env["nvml"]:
            env["driver_version"] = env["nvml"][0].get("driver_version")
    if device is not None:
        if device.type == "cuda":
            idx = device.index or 0
            env["device_name"] = torch.cuda.get_device_name(idx)
            major, minor = torch.cuda.get_device_capability(idx)
            env["compute_capability"] = f"{major}.{minor}"
        else:
            env["device_name"] = env["cpu"]["model"]
    return env
