"""Host peak memory: the kernel's own peak (VmHWM, reset per region) where Linux has it, a poller elsewhere."""

from __future__ import annotations

import mmap
import time

import pytest

from ampkit import host_memory as memory
from ampkit.host_memory import HostPeak, rss_bytes

MB = 1 << 20


def _transient(mb: int, hold_s: float = 0.0) -> None:
    """``mb`` MiB made resident and handed back to the kernel on return.

    An anonymous mapping of its own, written page by page: a malloc'd array could reuse pages the
    allocator kept resident from earlier tests in the same worker (CI once saw no growth at all).
    """
    buf = mmap.mmap(-1, mb * MB)
    page = mmap.PAGESIZE
    for off in range(0, mb * MB, page):
        buf[off] = 1
    time.sleep(hold_s)
    buf.close()


@pytest.mark.parametrize("kernel", [True, False])
def test_a_freed_allocation_inside_the_region_is_its_peak(kernel, monkeypatch):
    if kernel and not memory._reset_hwm():
        pytest.skip("this kernel keeps no resettable peak RSS")
    if not kernel:
        monkeypatch.setattr(memory, "_reset_hwm", lambda: False)
    _transient(400)  # a larger peak *before* the region must not count
    base = rss_bytes()
    with HostPeak(baseline=base) as peak:
        _transient(150, hold_s=0.05)  # the poller samples every 10 ms
    assert peak._kernel is kernel
    assert 140 * MB <= peak.peak <= 260 * MB, peak.peak / MB
