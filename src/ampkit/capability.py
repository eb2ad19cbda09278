"""Which NVIDIA compute capability runs which precision mode, and how an engine settles its mode."""

from __future__ import annotations

from collections.abc import Callable

from .errors import ModeUnavailableError
from .precision import AUTO, parse_mode

__all__ = ["TENSOR_CORES", "has_tensor_cores", "gpu_shortfall", "resolve_mode"]

#: The lowest compute capability with tensor-core math for each mode. float16 also runs (without
#: tensor cores) below 7.0; tf32, bf16 and fp8 do not run at all below theirs.
TENSOR_CORES: dict[str, tuple[int, int]] = {"fp16": (7, 0), "tf32": (8, 0), "bf16": (8, 0), "fp8": (8, 9)}
_GENERATION: dict[tuple[int, int], str] = {(7, 0): "Volta", (8, 0): "Ampere", (8, 9): "Ada/Hopper"}
#: Modes that every CUDA GPU runs, whatever its compute capability.
_ANY_GPU = ("fp32", "fp16")


def has_tensor_cores(mode: str, capability: tuple[int, int]) -> bool:
    """Whether a GPU of ``capability`` (major, minor) has tensor cores for ``mode``."""
    return tuple(capability) >= TENSOR_CORES[mode]


def gpu_shortfall(mode: str, capability: tuple[int, int], gpu: str) -> str | None:
    """Why a GPU of ``capability`` cannot run ``mode``, None when nothing in its capability stands in
    the way (a mode without a rule here included; a backend may still lack the kernels). ``gpu`` names
    the GPU in the sentence: "fp8 needs compute capability >= 8.9 (Ada/Hopper); NVIDIA A100 has 8.0"."""
    need = TENSOR_CORES.get(mode)
    if mode in _ANY_GPU or need is None or tuple(capability) >= need:
        return None
    major, minor = capability
    return f"{mode} needs compute capability >= {need[0]}.{need[1]} ({_GENERATION[need]}); {gpu} has {major}.{minor}"


def resolve_mode(mode: str, support: Callable[[str], tuple[bool, str]], auto: Callable[[], tuple[str, str]],
                 where: str, fp8_refusal: str) -> tuple[str, str]:
    """The mode a training engine runs and why: ``auto`` resolved, any other mode checked to run here.

    Args:
        mode: a mode, an alias or ``auto``.
        support: ``support(mode) -> (ok, why)``, the framework's capability check.
        auto: ``auto() -> (mode, reason)``, the framework's choice for ``auto``.
        where: ends the error for a mode that cannot run ("on cuda:0", "in TensorFlow here").
        fp8_refusal: the error for fp8, which the engines do not train in.

    Raises:
        UsageError: unknown mode (the message lists the valid ones).
        ModeUnavailableError: the mode cannot run here, or is fp8.
    """
    requested = parse_mode(mode)
    if requested == AUTO:
        resolved, reason = auto()
    else:
        resolved = requested
        ok, why = support(resolved)
        if not ok:
            raise ModeUnavailableError(f"mode {resolved!r} cannot run {where}: {why}")
        reason = f"{resolved} requested ({why})"
    if resolved == "fp8":
        raise ModeUnavailableError(fp8_refusal)
    return resolved, reason
