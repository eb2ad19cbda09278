"""How many CPU threads the commands that time on a CPU time with: one policy for doctor and bench.

* **Default: one thread on a CPU**, for the doctor and for bench alike (:data:`DEFAULT_CPU`). A
  precision changes the speed of a core's arithmetic (AMX or AVX512-BF16 against fp32 FMA); on one
  thread the ratio is that change and nothing else. On two or more threads every multi-threaded op
  waits at its barriers for the slowest thread, and on a machine other jobs share that wait decides
  the figure more than the precision does (measured on a busy 2-core machine: a small CNN's step
  took 38 ms on one thread and 748 ms on two). The doctor's cached verdict, which ``auto`` follows,
  is measured at the same count, so that bench checks the doctor's claim at the count it was made.
* ``--threads N`` (``threads=N`` in the library) times at N instead, in both commands, e.g. the
  count a user's training runs with (``torch.get_num_threads()``; all physical cores by default).
  N must be between 1 and the logical CPUs this process may run on; anything else is one line,
  exit 2.
* On a GPU the count is not changed unless asked for: CPU threads do not time a GPU's kernels.
* Every document that timed on a CPU keeps the count in ``environment.cpu.threads`` and its table's
  footer says it (:func:`footer`).

This module imports no framework.
"""

from __future__ import annotations

import os

from .errors import UsageError

#: the thread count doctor and bench time with on a CPU when none is given (see the module docstring)
DEFAULT_CPU = 1
FLAG = "--threads"


def cpu_limit() -> int:
    """The logical CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def check(value, flag: str = FLAG) -> int | None:
    """``value`` as a thread count (None passes: not given). A string of digits is read as the CLI
    gives it; 0, a negative number, a bool, a non-number or more than :func:`cpu_limit` is a
    :class:`~ampkit.errors.UsageError` naming the flag."""
    if value is None:
        return None
    limit = cpu_limit()
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise UsageError(f"{flag} must be a whole number from 1 to {limit} (the logical CPUs this process may run "
                         f"on); received {value!r}")
    return value


def resolve(value: int | None, accelerator: bool) -> int | None:
    """The count to time with: the one asked for, else :data:`DEFAULT_CPU` on a CPU; None on an
    accelerator when none was asked for (the framework's own count stays)."""
    if value is not None:
        return value
    return None if accelerator else DEFAULT_CPU


def words(n) -> str:
    return f"{n} thread" + ("" if n == 1 else "s")


def footer(cpu: dict | None, *, accelerator: bool = False) -> str | None:
    """``timed on 1 CPU thread (the default for doctor and bench; --threads N times at N)``, from a
    document's ``environment.cpu``; None when it holds no count."""
    n = (cpu or {}).get("threads")
    if not isinstance(n, int) or isinstance(n, bool):
        return None
    if accelerator:
        return f"host CPU threads: {n} (the GPU's kernels are timed on the GPU; --threads N sets the host's)"
    default = " (the default for doctor and bench; --threads N times at N)" if n == DEFAULT_CPU else \
        " (--threads; the default for doctor and bench is 1)"
    return f"timed on {words(n)} of the CPU{default}"


def clock_words(rows) -> list[str]:
    """How bench timed its steps, where a row says so: on one CPU thread its CPU clock (every op of the
    step runs on it, so another job on a shared machine adds nothing to a step's time)."""
    if any(getattr(r, "clock", None) == "thread_cpu" for r in rows):
        return ["step times: the CPU time of the one thread every op of the step ran on (time.thread_time): "
                "another job on this machine adds nothing to them; on an idle machine they equal the wall clock."]
    return []
