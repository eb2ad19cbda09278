"""What this CPU can do for low precision, and the GPU rules that need no framework."""

from __future__ import annotations

import functools
import os
import platform

__all__ = ["cpu_info", "cpu_has_fast_bf16", "cpu_has_fast_fp16", "auto_for_cpu", "auto_for_gpu", "cpu_mode_support",
           "cpu_emulation_note", "labelled_guess"]

_FEATURES = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16", "amx_tile")


@functools.lru_cache(maxsize=1)
def cpu_info() -> dict:
    """CPU model, logical CPU count and the ISA features that matter for low precision."""
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
    info = {"model": model, "machine": platform.machine(), "logical_cpus": os.cpu_count()}
    info.update({f: f in flags for f in _FEATURES})
    return info


def cpu_features(info: dict) -> list[str]:
    """The low-precision ISA features present in a ``cpu_info()``-shaped dict, in a fixed order."""
    return [f for f in _FEATURES if info.get(f)]


def cpu_has_fast_bf16(info: dict | None = None) -> bool:
    info = info or cpu_info()
    return bool(info.get("avx512_bf16") or info.get("amx_bf16") or info.get("amx_tile"))


def cpu_has_fast_fp16(info: dict | None = None) -> bool:
    info = info or cpu_info()
    return bool(info.get("avx512_fp16") or info.get("amx_fp16"))


def auto_for_gpu(major: int, minor: int, name: str, bf16_native: bool = True) -> tuple[str, str]:
    """The training mode ``auto`` picks for a GPU of this compute capability, with the reason
    (the thresholds: :data:`ampkit.capability.TENSOR_CORES`)."""
    from .capability import TENSOR_CORES, has_tensor_cores

    cc, need = (major, minor), {m: "{}.{}".format(*TENSOR_CORES[m]) for m in ("fp16", "bf16")}
    if has_tensor_cores("bf16", cc) and bf16_native:
        return "bf16", f"{name} has compute capability {major}.{minor} >= {need['bf16']}: bf16 tensor cores, no loss scaling needed"
    if has_tensor_cores("fp16", cc):
        return "fp16", f"{name} has compute capability {major}.{minor}: fp16 tensor cores but no bf16, so fp16 with loss scaling"
    return "fp32", f"{name} has compute capability {major}.{minor} < {need['fp16']}: no tensor cores, low precision gains nothing"


#: how a choice made from a table, not a measurement, is labelled wherever it is shown
GUESS = "capability guess"


def doctor_command(framework: str | None = None) -> str:
    """The doctor run that measures ``framework`` (a plain ``ampkit doctor`` measures torch when it
    is installed, so Keras users need the flag)."""
    return "ampkit doctor --framework tensorflow" if framework == "tensorflow" else "ampkit doctor"


def labelled_guess(mode: str, why: str, framework: str | None = None) -> tuple[str, str]:
    """``(mode, "capability guess (why); run `ampkit doctor` to measure")``."""
    return mode, f"{GUESS} ({why}); run `{doctor_command(framework)}` to measure"


def cpu_capability_choice(info: dict | None = None) -> tuple[str, str]:
    """What the CPU's instructions suggest for training, unlabelled: capability, never speed."""
    if cpu_has_fast_bf16(info):
        return "bf16", f"{_instructions('bf16', info)} for bf16 matmuls: bf16"
    return "fp32", f"this CPU has no {' or '.join(native_instructions('bf16', info)[1])}, so bf16 would be emulated: fp32"


def auto_for_cpu(info: dict | None = None) -> tuple[str, str]:
    """``auto`` on a CPU from its instructions alone, labelled as the guess it is.

    The backends resolve ``auto`` from a measurement first (:mod:`ampkit.auto`); this is the
    fallback where nothing was or can be measured."""
    return labelled_guess(*cpu_capability_choice(info))


#: per mode, the /proc/cpuinfo flags of the instructions that run it natively, and their names
_NATIVE = {"bf16": (("avx512_bf16", "AVX512-BF16"), ("amx_bf16", "AMX-BF16")),
           "fp16": (("avx512_fp16", "AVX512-FP16"), ("amx_fp16", "AMX-FP16"))}


def native_instructions(mode: str, info: dict | None = None) -> tuple[list[str], list[str]]:
    """``(has, lacks)``: the names of ``mode``'s native instructions this CPU has and lacks, exactly
    (a CPU with AVX512-FP16 and AMX-BF16 has AVX512-FP16 for fp16 and lacks AMX-FP16: issue #49)."""
    info = info or cpu_info()
    pairs = _NATIVE.get(mode, ())
    has = [name for flag, name in pairs if info.get(flag)]
    if mode == "bf16" and not info.get("amx_bf16") and info.get("amx_tile"):
        has.append("AMX tiles")  # tiles without the bf16 flag: counted as bf16-capable (cpu_has_fast_bf16)
    return has, [name for flag, name in pairs if not info.get(flag) and not (flag == "amx_bf16" and "AMX tiles" in has)]


def _instructions(mode: str, info: dict | None = None) -> str:
    """The capability in words: which instructions this CPU has (or lacks) for ``mode``, by name."""
    if mode not in _NATIVE:
        return ""
    has, lacks = native_instructions(mode, info)
    if not has:
        return f"this CPU has no {' or '.join(lacks)}, so {mode} is emulated"
    return f"this CPU has {' and '.join(has)} instructions" + (f" (no {' or '.join(lacks)})" if lacks else "")


def cpu_emulation_note(mode: str, info: dict | None = None) -> str:
    """Goes after "<mode> is slower than fp32 here" (a mode MEASURED slower): the capability, never a
    speed claim the measurement contradicts. ``": this CPU has no AVX512-BF16 or AMX-BF16, so bf16 is
    emulated"``, or ``" although this CPU has AVX512-FP16 instructions (no AMX-FP16)"`` (having the
    instructions does not make the kernels that ran use them)."""
    words = _instructions(mode, info)
    if not words:
        return ""
    return f": {words}" if "emulated" in words else f" although {words}"


def cpu_mode_support(mode: str, framework_words: str) -> tuple[bool, str] | None:
    """Capability of a CPU for ``mode`` (the same facts in both frameworks), None for an unknown mode.

    ``framework_words`` names what runs it ("CPU autocast", "Keras mixed_bfloat16 policy on the CPU").
    """
    if mode == "fp32":
        return True, "float32 runs everywhere"
    if mode == "tf32":
        return False, "TF32 is a tensor-core math mode of NVIDIA GPUs (compute capability >= 8.0); this is a CPU"
    if mode == "fp8":
        return False, "fp8 matmuls need an NVIDIA GPU with compute capability >= 8.9; this is a CPU"
    if mode in ("bf16", "fp16"):
        # capability only: whether the mode is FAST here is for the doctor to measure (its verdict
        # reason says "slower" with the measured figures when it is)
        dtype = "bfloat16" if mode == "bf16" else "float16"
        return True, f"{framework_words} {dtype}; {_instructions(mode)}"
    return None
