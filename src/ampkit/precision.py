"""The one precision vocabulary of ampkit, parsed once into an immutable description."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import UsageError

#: Modes in the order the reports list them.
MODES: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16", "fp8")
#: Modes that ``auto`` chooses among and that ``--modes all`` always holds.
TRAINING_MODES: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16")
#: Modes that bench, parity and audit accept by name: the training modes and fp8, which the PyTorch
#: engine trains through torchao (``ampkit[fp8]``; emulated where the hardware has no fp8).
COMMAND_MODES: tuple[str, ...] = TRAINING_MODES + ("fp8",)
AUTO = "auto"


def all_modes() -> tuple[str, ...]:
    """What ``--modes all`` means: the training modes, and fp8 where torchao is installed (found, not
    imported: nothing pays for torchao unless fp8 runs)."""
    import importlib.util

    return COMMAND_MODES if importlib.util.find_spec("torchao") is not None else TRAINING_MODES

_ALIASES: dict[str, str] = {
    "32": "fp32", "float32": "fp32", "32-true": "fp32", "fp32": "fp32",
    "tf32": "tf32",
    "16": "fp16", "16-mixed": "fp16", "mixed_float16": "fp16", "float16": "fp16", "half": "fp16",
    "fp16": "fp16",
    "bf16": "bf16", "bf16-mixed": "bf16", "mixed_bfloat16": "bf16", "bfloat16": "bf16",
    "fp8": "fp8",
    "auto": AUTO,
}


@dataclass(frozen=True)
class Precision:
    """What a mode means, framework-neutral.

    Attributes:
        mode: canonical name (``fp32``, ``tf32``, ``fp16``, ``bf16``, ``fp8``).
        compute_dtype: dtype name that matmuls/convs compute in under autocast.
        param_dtype: dtype of the master weights (always float32 here).
        autocast: whether an autocast region is needed.
        loss_scaling: whether dynamic loss scaling is needed (fp16 only).
        tf32: True to turn TF32 math on, False to force it off, None to leave the flags alone.
        keras_policy: the Keras dtype policy name for this mode.
    """

    mode: str
    compute_dtype: str
    param_dtype: str = "float32"
    autocast: bool = False
    loss_scaling: bool = False
    tf32: bool | None = None
    keras_policy: str | None = None


_PRECISIONS: dict[str, Precision] = {
    "fp32": Precision("fp32", "float32", tf32=False, keras_policy="float32"),
    "tf32": Precision("tf32", "float32", tf32=True, keras_policy="float32"),
    "fp16": Precision("fp16", "float16", autocast=True, loss_scaling=True, keras_policy="mixed_float16"),
    "bf16": Precision("bf16", "bfloat16", autocast=True, keras_policy="mixed_bfloat16"),
    "fp8": Precision("fp8", "float8_e4m3fn"),
}


def valid_names() -> str:
    return ", ".join(MODES + (AUTO,))


def parse_mode(name: str, *, allow_auto: bool = True) -> str:
    """Return the canonical mode for ``name`` (case-insensitive, aliases accepted).

    Raises:
        UsageError (a ValueError) naming the valid modes when ``name`` is unknown.
    """
    if isinstance(name, int) and not isinstance(name, bool) and str(name) in _ALIASES:
        name = str(name)  # Lightning's precision=16 / precision=32
    if not isinstance(name, str):
        raise UsageError(f"precision mode must be a string, received {name!r}; valid modes: {valid_names()}")
    key = name.strip().lower()
    mode = _ALIASES.get(key)
    if mode is None or (mode == AUTO and not allow_auto):
        from .suggest import did_you_mean

        allowed = ", ".join(MODES + ((AUTO,) if allow_auto else ()))
        raise UsageError(
            f"unknown precision mode {name!r}; {did_you_mean(name, MODES + ((AUTO,) if allow_auto else ()))}"
            f"valid modes: {allowed} "
            "(aliases: 32, 32-true, float32, 16, 16-mixed, half, float16, mixed_float16, "
            "bf16-mixed, bfloat16, mixed_bfloat16)"
        )
    return mode


def parse_mode_list(text: str, *, choices: tuple[str, ...] | None = None, allow_auto: bool = False) -> list[str]:
    """Parse ``fp32,bf16,fp16`` or ``all`` into canonical modes, in the given order, no duplicates
    (with ``allow_auto``, ``auto`` stays in the list for the caller to resolve on its device).
    ``choices``: the modes accepted (default :data:`COMMAND_MODES`; ``all``: :func:`all_modes`)."""
    if text.strip().lower() == "all":
        return list(all_modes() if choices is None else choices)
    choices = COMMAND_MODES if choices is None else choices
    modes: list[str] = []
    for part in text.split(","):
        if not part.strip():
            continue
        mode = parse_mode(part, allow_auto=allow_auto)
        if mode not in choices and mode != AUTO:
            raise UsageError(f"mode {mode!r} is not available here; choose from: {', '.join(choices)}")
        if mode not in modes:
            modes.append(mode)
    if not modes:
        raise UsageError(f"no modes given; choose from: {', '.join(choices)} or 'all'")
    return modes


def get_precision(mode: str) -> Precision:
    """The immutable description of a mode (aliases accepted; ``auto`` must be resolved first)."""
    canonical = parse_mode(mode, allow_auto=False)
    return _PRECISIONS[canonical]
