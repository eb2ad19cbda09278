"""Devices and what they can do: parsing ``--device``, CPU ISA features, CUDA capability.

Small functions, nothing heavy at import time. Every answer that says "no" carries the reason.
"""

from __future__ import annotations

import functools
import os
import platform
import re

from .errors import UsageError
from .precision import AUTO

DEVICE_HELP = "use auto, cpu, cuda or cuda:N"


def resolve_device(spec="auto"):
    """Turn ``auto``/``cpu``/``cuda``/``cuda:N`` (or a torch.device) into a torch.device.

    Raises:
        UsageError: unknown device word, CUDA asked for without CUDA, or an index past the GPU count.
    """
    import torch

    if isinstance(spec, torch.device):
        spec = str(spec)
    if not isinstance(spec, str):
        raise UsageError(f"device must be a string, received {spec!r}; {DEVICE_HELP}")
    text = spec.strip().lower()
    if text in ("", AUTO):
        return torch.device("cuda:0") if torch.cuda.is_available() else torch.device("cpu")
    if text == "cpu":
        return torch.device("cpu")
    match = re.fullmatch(r"cuda(?::(\d+))?", text)
    if not match:
        raise UsageError(f"unknown device {spec!r}; {DEVICE_HELP}")
    if not torch.cuda.is_available():
        build = "a CPU-only build of torch" if torch.version.cuda is None else "no visible GPU"
        raise UsageError(f"device {spec!r} asked for, but CUDA is not available here ({build}); use --device cpu")
    index = int(match.group(1) or 0)
    count = torch.cuda.device_count()
    if index >= count:
        raise UsageError(f"device {spec!r} asked for, but only {count} CUDA device(s) exist (cuda:0..cuda:{count - 1})")
    return torch.device(f"cuda:{index}")


@functools.lru_cache(maxsize=1)
def cpu_info() -> dict:
    """CPU model, thread count and the ISA features that matter for low precision."""
    flags: set[str] = set()
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name") and ":" in line:
                    model = line.split(":", 1)[1].strip()
                elif line.startswith(("flags", "Features")) and ":" in line:
                    flags.update(line.split(":", 1)[1].split())
    except OSError:
        pass
    info = {
        "model": model,
        "machine": platform.machine(),
        "logical_cpus": os.cpu_count(),
        "avx2": "avx2" in flags,
        "avx512f": "avx512f" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
        "avx512_fp16": "avx512_fp16" in flags,
        "amx_bf16": "amx_bf16" in flags,
        "amx_fp16": "amx_fp16" in flags,
        "amx_tile": "amx_tile" in flags,
    }
    try:  # torch's own view of the same features (private helpers; absent in some builds)
        import torch

        info["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        info["threads"] = torch.get_num_threads()
        if hasattr(torch.cpu, "_is_avx512_bf16_supported"):
            info["avx512_bf16"] = info["avx512_bf16"] or bool(torch.cpu._is_avx512_bf16_supported())
        if hasattr(torch.cpu, "_is_amx_tile_supported"):
            info["amx_tile"] = info["amx_tile"] or bool(torch.cpu._is_amx_tile_supported())
        if hasattr(torch.cpu, "_is_amx_fp16_supported"):
            info["amx_fp16"] = info["amx_fp16"] or bool(torch.cpu._is_amx_fp16_supported())
    except Exception:  # pragma: no cover - a torch without these helpers
        pass
    return info


def cpu_has_fast_bf16() -> bool:
    info = cpu_info()
    return bool(info["avx512_bf16"] or info["amx_bf16"] or info["amx_tile"])


def cpu_has_fast_fp16() -> bool:
    info = cpu_info()
    return bool(info["avx512_fp16"] or info["amx_fp16"])


def cuda_capability(device) -> tuple[int, int]:
    import torch

    return tuple(torch.cuda.get_device_capability(device))  # type: ignore[return-value]


def _cuda_bf16_native(device) -> bool:
    import torch

    with torch.cuda.device(device):
        try:
            return bool(torch.cuda.is_bf16_supported(including_emulation=False))
        except TypeError:  # older torch has no including_emulation
            return cuda_capability(device) >= (8, 0)


def fp8_torch_support() -> tuple[bool, str]:
    import torch

    if not hasattr(torch, "float8_e4m3fn"):
        return False, f"torch {torch.__version__} has no float8 dtypes"
    if not hasattr(torch, "_scaled_mm"):
        return False, f"torch {torch.__version__} has no scaled matmul (torch._scaled_mm)"
    return True, "torch has float8 dtypes and scaled matmul"


def mode_support(mode: str, device) -> tuple[bool, str]:
    """Whether ``device`` can run ``mode`` at all, with the reason in words (capability, not speed)."""
    import torch

    if device.type == "cpu":
        if mode == "fp32":
            return True, "float32 runs everywhere"
        if mode == "tf32":
            return False, "TF32 is a tensor-core math mode of NVIDIA GPUs (compute capability >= 8.0); this is a CPU"
        if mode == "fp8":
            return False, "fp8 matmuls need an NVIDIA GPU with compute capability >= 8.9; this is a CPU"
        if mode == "bf16":
            fast = cpu_has_fast_bf16()
            return True, "CPU autocast bfloat16" + (
                " (native AVX512-BF16/AMX)" if fast else " (this CPU has no AVX512-BF16 or AMX: bf16 is emulated)"
            )
        if mode == "fp16":
            fast = cpu_has_fast_fp16()
            return True, "CPU autocast float16" + (
                " (native AVX512-FP16/AMX-FP16)" if fast else " (this CPU has no AVX512-FP16 or AMX-FP16: fp16 is emulated)"
            )
    elif device.type == "cuda":
        major, minor = cuda_capability(device)
        cc = f"{major}.{minor}"
        name = torch.cuda.get_device_name(device)
        if mode == "fp32":
            return True, "float32 runs everywhere"
        if mode == "fp16":
            note = "tensor cores" if (major, minor) >= (7, 0) else "no fp16 tensor cores before compute capability 7.0"
            return True, f"{name} (compute capability {cc}) runs float16 ({note})"
        if mode in ("tf32", "bf16"):
            if (major, minor) < (8, 0):
                return False, f"{mode} needs compute capability >= 8.0 (Ampere); {name} has {cc}"
            if mode == "bf16" and not _cuda_bf16_native(device):
                return False, f"{name} (compute capability {cc}) has no native bfloat16"
            return True, f"{name} (compute capability {cc}) has {mode} tensor cores"
        if mode == "fp8":
            if (major, minor) < (8, 9):
                return False, f"fp8 needs compute capability >= 8.9 (Ada/Hopper); {name} has {cc}"
            ok, why = fp8_torch_support()
            if not ok:
                return False, why
            cuda_v = torch.version.cuda or "0.0"
            if tuple(int(x) for x in cuda_v.split(".")[:2]) < (12, 1):
                return False, f"fp8 needs CUDA >= 12.1; torch was built with CUDA {cuda_v}"
            return True, f"{name} (compute capability {cc}) has fp8 tensor cores"
    else:
        return False, f"device type {device.type!r} is not supported by ampkit"
    raise UsageError(f"unknown mode {mode!r}")


def auto_for_gpu(major: int, minor: int, name: str, bf16_native: bool = True) -> tuple[str, str]:
    """The training mode ``auto`` picks for a GPU of this compute capability, with the reason."""
    if (major, minor) >= (8, 0) and bf16_native:
        return "bf16", f"{name} has compute capability {major}.{minor} >= 8.0: bf16 tensor cores, no loss scaling needed"
    if major >= 7:
        return "fp16", f"{name} has compute capability {major}.{minor}: fp16 tensor cores but no bf16, so fp16 with loss scaling"
    return "fp32", f"{name} has compute capability {major}.{minor} < 7.0: no tensor cores, low precision gains nothing"


def auto_for_cpu() -> tuple[str, str]:
    if cpu_has_fast_bf16():
        return "bf16", "this CPU has AVX512-BF16/AMX: bf16 runs natively"
    return "fp32", "bf16 on this CPU is emulated (no AVX512-BF16 or AMX), so fp32 is faster"


def resolve_auto(device) -> tuple[str, str]:
    """Pick the training mode for ``device`` by capability, with the reason in words."""
    import torch

    if device.type == "cuda":
        major, minor = cuda_capability(device)
        native = (major, minor) >= (8, 0) and _cuda_bf16_native(device)  # only ask a GPU that may have it
        return auto_for_gpu(major, minor, torch.cuda.get_device_name(device), native)
    return auto_for_cpu()
