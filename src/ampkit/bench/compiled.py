"""``bench --compile off|on|both``: what the driver does around compiled rows, for every framework.

``on``: every mode runs with the model compiled (torch.compile with its default backend; Keras
``jit_compile=True``). ``both``: the mode sequence runs eager, then compiled, each row in its own
fresh child as always. Each group's ``speedup_vs_fp32`` is against its own fp32 row (compiled
against compiled); a compiled row of ``both`` gains ``speedup_vs_eager``: its samples/s over the
same mode's eager samples/s. The first (compiling) steps are never timed: a backend reports them as
``compile_s`` and runs at least one warm-up step when compiling.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..errors import UsageError
from .report import BenchRow

COMPILE_CHOICES = ("off", "on", "both")
UNAVAILABLE = "compile unavailable"


def check_compile(value) -> str:
    """--compile: off, on or both (True/False accepted from Python as on/off)."""
    if value is True or value is False:
        return "on" if value else "off"
    if not isinstance(value, str) or value.strip().lower() not in COMPILE_CHOICES:
        raise UsageError(f"--compile must be one of {', '.join(COMPILE_CHOICES)}; received {value!r}")
    return value.strip().lower()


def compiled_warmup(warmup: int, compiled: bool) -> int:
    """A compiled run warms up for at least one step: the compiling step is never timed."""
    return max(warmup, 1) if compiled else warmup


def run_variants(cfg, run_group: Callable[[object], tuple[list[BenchRow], bool]]) -> tuple[list[BenchRow], bool]:
    """``run_group(cfg)`` once (off/on) or twice (both: eager, then compiled); rows concatenated,
    the compiled ones with ``speedup_vs_eager``. Ctrl-C during the eager group skips the compiled one."""
    if cfg.compile != "both":
        return _marked(cfg, *run_group(cfg))
    eager, interrupted = run_group(replace(cfg, compile="off"))
    if interrupted:
        return eager, True
    compiled, interrupted = _marked(replace(cfg, compile="on"), *run_group(replace(cfg, compile="on")))
    for row in compiled:
        base = next((r for r in eager if r.mode == row.mode and r.status == "ok"), None)
        if base is not None and row.status == "ok" and row.samples_per_s and base.samples_per_s \
                and row.batch_size == base.batch_size:
            row.speedup_vs_eager = row.samples_per_s / base.samples_per_s
    return eager + compiled, interrupted


def _marked(cfg, rows: list[BenchRow], interrupted: bool) -> tuple[list[BenchRow], bool]:
    """Every row of a compiled group says so, an unsupported mode's too (it was asked compiled)."""
    for row in rows:
        row.compiled = row.compiled or cfg.compile == "on"
    return rows, interrupted


def compiled_steps(row: BenchRow, cfg, say):
    """For a backend that compiles through its framework's own flag (Keras ``jit_compile``):
    marks the row, and returns ``(warmup, say, first_step_s)``: the warm-up (at least one step when
    compiled), ``say`` wrapped to note when the first step ended, and a getter for that step's
    seconds since this call (the compiling step: ``compile_s``)."""
    import time

    row.compiled = cfg.compile == "on"
    t0, first = time.perf_counter(), []

    def wrapped(kind, done, total):
        if kind == "step" and not first:
            first.append(time.perf_counter() - t0)
        say(kind, done, total)

    return compiled_warmup(cfg.warmup, row.compiled), wrapped, lambda: first[0] if first else None
