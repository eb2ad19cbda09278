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


def timing_cpus(threads: int | None) -> frozenset | None:
    """The CPUs every mode's process of one bench times on: ``threads`` of those this process may run
    on, starting at the one it runs on now (then the next ones, in order, wrapping), the same for
    every mode (None: no count, e.g. a GPU, or as many as there are).

    Left to the scheduler, each mode's process tends to stay on the CPU it last ran on (it wakes
    where it slept), and on a shared machine one CPU is busier than another -- interrupts, another
    job, a sibling hyperthread on the host -- for the whole run: measured on a 2-core VM under a
    changing load, one mode's rounds ran 20-30% slower than the others' for a whole run, and the
    speedup moved between runs by more than any interval of one run could show (#45). On the same
    CPUs, what one CPU's neighbours do hits every mode alike, as it does a hand loop in one process.
    Starting at this process's own CPU spreads two benches started side by side (the scheduler put
    them on different CPUs) instead of stacking both on one fixed CPU."""
    if threads is None:
        return None
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    if threads >= len(allowed):
        return None
    now = current_cpu()
    start = allowed.index(now) if now in allowed else len(allowed) - threads
    return frozenset(allowed[(start + i) % len(allowed)] for i in range(threads))


def current_cpu() -> int | None:
    """The CPU this thread runs on now (Linux: field 39 of /proc/thread-self/stat), else None."""
    try:
        with open("/proc/thread-self/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return None


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
    step runs on it, so another job's time slices on a shared machine are not counted), and the CPUs
    every mode ran on where bench pinned them (:func:`timing_cpus`)."""
    out = []
    cpus = {tuple(r.cpus) for r in rows if getattr(r, "cpus", None)}
    counts = {getattr(r, "threads", None) for r in rows if getattr(r, "cpus", None)}
    if len(cpus) == 1 and counts == {len(next(iter(cpus)))}:  # one CPU per thread, the same CPUs for every mode
        (one,) = cpus
        out.append(f"every mode's process ran on CPU{'s' if len(one) > 1 else ''} {', '.join(map(str, one))}, "
                   "the same for all (a busier CPU would otherwise slow one mode for a whole run).")
    if any(getattr(r, "clock", None) == "thread_cpu" for r in rows):
        return out + ["step times: the CPU time of the one thread every op of the step ran on (time.thread_time): "
                "another job's time slices are not counted; on an idle machine they equal the wall clock."]
    return out
