"""What the CLI checks before any work starts, beside the configs (which check every value, for the
library too: :mod:`ampkit.checks`): output paths and the distributed environment. A bad value is
one line and exit 2 in well under a second."""

from __future__ import annotations

import os

from ..errors import UsageError
from ..outputs import check_distinct, check_output, reserve_stdout


def outputs(args, *specs: tuple[str, str, str, bool]) -> None:
    """``specs``: (attribute, what, flag, stdout allowed). Checks each path and that no two collide;
    when one of them is stdout, reserves stdout for it (user prints go to stderr)."""
    pairs = []
    for attr, what, flag, stdout_ok in specs:
        path = getattr(args, attr, None)
        check_output(path, what, flag, stdout_ok=stdout_ok)
        pairs.append((path, flag))
    check_distinct(*pairs)
    for attr, _what, _flag, _ok in specs:  # absolute now: user code that changes the working folder (os.chdir
        path = getattr(args, attr, None)   # in a factory) must not move where the outputs land
        if path and path != "-":
            setattr(args, attr, os.path.abspath(path))
    if any(p == "-" for p, _ in pairs):
        reserve_stdout()


def distributed_env(framework: str) -> int:
    """The torchrun variables, consistent and numeric; returns WORLD_SIZE (1 without a launcher).

    RANK=1 alone (no WORLD_SIZE) would make a rank that reports nothing; WORLD_SIZE=2 without a
    launcher's MASTER_ADDR/MASTER_PORT would wait forever for peers that never come.
    """
    env = os.environ
    values = {}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT"):
        text = env.get(name)
        if text is None or text == "":
            continue
        try:
            values[name] = int(text)
        except ValueError:
            raise UsageError(f"environment variable {name}={text!r} is not an integer; "
                             "let torchrun set it, or unset it for a single-process run") from None
        if values[name] < 0:
            raise UsageError(f"environment variable {name}={text} is negative; let torchrun set it, or unset it")
    world = values.get("WORLD_SIZE")
    if world is None:
        stray = [f"{k}={values[k]}" for k in ("RANK", "LOCAL_RANK") if values.get(k)]
        if stray:
            raise UsageError(f"{' and '.join(stray)} set without WORLD_SIZE: launch with torchrun "
                             "(torchrun --nproc_per_node N -m ampkit bench ...) or unset it")
        return 1
    if world < 1:
        raise UsageError(f"environment variable WORLD_SIZE={world} must be at least 1")
    rank = values.get("RANK", 0)
    if rank >= world:
        raise UsageError(f"RANK={rank} must be below WORLD_SIZE={world}; let torchrun set them")
    local_world = values.get("LOCAL_WORLD_SIZE")
    if local_world is not None and values.get("LOCAL_RANK", 0) >= local_world:
        raise UsageError(f"LOCAL_RANK={values.get('LOCAL_RANK')} must be below LOCAL_WORLD_SIZE={local_world}")
    if world > 1:
        if framework == "tensorflow":
            raise UsageError(f"WORLD_SIZE={world}: a multi-process bench is PyTorch-only (torchrun); "
                             "use --framework torch or unset WORLD_SIZE")
        missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if not env.get(k)]
        if missing:
            raise UsageError(f"WORLD_SIZE={world} but {', '.join(missing)} not set: launch with torchrun "
                             f"(torchrun --nproc_per_node {world} -m ampkit bench ...) or unset WORLD_SIZE")
        if not 1 <= values["MASTER_PORT"] <= 65535:
            raise UsageError(f"MASTER_PORT={values['MASTER_PORT']} is not a TCP port (1-65535)")
    return world
