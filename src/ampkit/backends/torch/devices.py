"""PyTorch devices and what they can do: parsing ``--device``, CUDA capability, mode support."""

from __future__ import annotations

import re

from ...capability import gpu_shortfall, has_tensor_cores
from ...cpu import auto_for_gpu, cpu_capability_choice, cpu_mode_support
from ...errors import UsageError
from ...precision import AUTO

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
    if re.fullmatch(r"cpu(?::\d+)?", text):  # torch.device("cpu", 0) prints as "cpu:0": one CPU device
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


def torch_cpu_view() -> dict:
    """torch's own view of the CPU features (private helpers; absent in some builds)."""
    import torch

    view: dict = {}
    try:
        view["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        view["threads"] = torch.get_num_threads()
        for key, helper in (("avx512_bf16", "_is_avx512_bf16_supported"), ("amx_tile", "_is_amx_tile_supported"),
                            ("amx_fp16", "_is_amx_fp16_supported")):
            if hasattr(torch.cpu, helper):
                view[key] = bool(getattr(torch.cpu, helper)())
    except Exception:  # pragma: no cover - a torch without these helpers
        pass
    return view


def cuda_capability(device) -> tuple[int, int]:
    import torch

    return tuple(torch.cuda.get_device_capability(device))  # type: ignore[return-value]


def _cuda_bf16_native(device) -> bool:
    import torch

    with torch.cuda.device(device):
        try:
            return bool(torch.cuda.is_bf16_supported(including_emulation=False))
        except TypeError:  # older torch has no including_emulation
            return has_tensor_cores("bf16", cuda_capability(device))


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
        answer = cpu_mode_support(mode, "CPU autocast")
        if answer is not None:
            return answer
    elif device.type == "cuda":
        major, minor = cuda_capability(device)
        cc = f"{major}.{minor}"
        name = torch.cuda.get_device_name(device)
        short = gpu_shortfall(mode, (major, minor), name)
        if short is not None:
            return False, short
        if mode == "fp32":
            return True, "float32 runs everywhere"
        if mode == "fp16":
            note = ("tensor cores" if has_tensor_cores("fp16", (major, minor))
                    else "no fp16 tensor cores before compute capability 7.0")
            return True, f"{name} (compute capability {cc}) runs float16 ({note})"
        if mode in ("tf32", "bf16"):
            if mode == "bf16" and not _cuda_bf16_native(device):
                return False, f"{name} (compute capability {cc}) has no native bfloat16"
            return True, f"{name} (compute capability {cc}) has {mode} tensor cores"
        if mode == "fp8":
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


def auto_fingerprint(device) -> dict:
    """The environment a measured ``auto`` verdict holds for (:mod:`ampkit.auto_cache`): torch and its
    version, the device (a GPU by name, capability and CUDA version), the CPU and its features."""
    import torch

    from ... import auto_cache

    if device.type == "cuda":
        major, minor = cuda_capability(device)
        name = f"{torch.cuda.get_device_name(device)} (compute capability {major}.{minor})"
        return auto_cache.fingerprint("torch", torch.__version__, name, cuda=torch.version.cuda)
    return auto_cache.fingerprint("torch", torch.__version__, device.type)


def _where(device) -> str:
    import torch

    return "this CPU" if device.type == "cpu" else f"{torch.cuda.get_device_name(device)} ({device})"


def capability_auto(device) -> tuple[str, str]:
    """What the device's capability suggests for ``auto``, unlabelled (a table, not a measurement)."""
    import torch

    if device.type == "cuda":
        major, minor = cuda_capability(device)
        native = has_tensor_cores("bf16", (major, minor)) and _cuda_bf16_native(device)  # only ask one that may
        return auto_for_gpu(major, minor, torch.cuda.get_device_name(device), native)
    return cpu_capability_choice()


def resolve_auto(device) -> tuple[str, str]:
    """Pick the training mode for ``device`` with the reason in words, from a measurement wherever
    one exists (:mod:`ampkit.auto`): the doctor's cached verdict for this environment; else,
    on a CPU, a quick fp32-vs-bf16 check (cached for next time); else (a GPU nobody measured) the
    capability rule, labelled as a guess."""
    from ...auto import resolve

    measure = None
    if device.type == "cpu":
        def measure():
            from .doctor_ops import quick_auto

            return quick_auto(device)
    import torch

    threads = torch.get_num_threads() if device.type == "cpu" else None  # what this process trains with
    return resolve(auto_fingerprint(device), _where(device), lambda: capability_auto(device), measure, threads=threads)
