"""Host memory and out-of-memory errors, the same for every framework."""

from __future__ import annotations

import os
import threading

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """Resident set size of this process: /proc/self/statm where it exists (cheap), else psutil."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        import psutil

        return int(psutil.Process().memory_info().rss)


#: ``--batch-size auto``'s children: large allocations mmapped and returned on free, so the RSS falls
#: after each trial and one trial's peak does not carry into the next (glibc's dynamic threshold would
#: keep freed blocks on the heap). Only searching children get it: under it every large tensor of a
#: timed step is a fresh mapping whose pages fault in again at every step (measured: a small MLP's
#: fp32 step 5.5 ms of CPU instead of 3.0, 240,000 page faults a second), which slows every mode by
#: the same few ms and pulls each speedup towards 1. A searching child keeps it for its timed steps:
#: its peak must be the one the search measured (the default allocator's heap peak is larger).
SEARCH_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def is_oom(exc: BaseException) -> bool:
    """Out of memory, as torch (OutOfMemoryError, "out of memory"), TensorFlow (ResourceExhaustedError)
    and the host allocator (MemoryError, "cannot allocate memory") say it."""
    if isinstance(exc, MemoryError) or type(exc).__name__ in ("OutOfMemoryError", "ResourceExhaustedError"):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text
                                              or "cannot allocate memory" in text)


def _hwm_bytes() -> int | None:
    """The kernel's peak RSS of this process (VmHWM), or None where /proc does not say."""
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _reset_hwm() -> bool:
    """Reset the kernel's peak RSS to the current RSS (``/proc/self/clear_refs`` ``5``, Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return False
    return _hwm_bytes() is not None


class HostPeak:
    """Peak RSS above ``baseline`` over a ``with`` region.

    Where Linux keeps the peak itself (``VmHWM``, resettable through ``/proc/self/clear_refs``), it is
    read at the end: exact, and nothing runs beside the steps being timed. Elsewhere a thread samples
    the RSS every ``interval_s`` (see docs/internals.md). Measured on a 2-core CPU, torchvision
    ResNet-18, batch 16: bench/hand-loop 0.944 with the 10 ms poller, see docs/results.md for after.
    """

    source = "process RSS above baseline"

    def __init__(self, baseline: int = 0, interval_s: float = 0.01):
        self.baseline = baseline
        self.interval_s = interval_s
        self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._kernel = False

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes())
            self._stop.wait(self.interval_s)

    def __enter__(self) -> HostPeak:
        self.peak = rss_bytes()
        self._kernel = _reset_hwm()
        if not self._kernel:
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> bool:
        if self._kernel:
            self.peak = max(self.peak, _hwm_bytes() or 0)
        else:
            self._stop.set()
            self._thread.join()
        self.peak = max(0, max(self.peak, rss_bytes()) - self.baseline)
        return False
