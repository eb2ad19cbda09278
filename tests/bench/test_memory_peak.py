"""Host peak memory: the kernel's own peak (VmHWM, reset per region) where Linux has it, a poller elsewhere."""

from __future__ import annotations

import time

import numpy as np
import pytest

from ampkit.bench import memory
from ampkit.bench.memory import HostPeak, rss_bytes

MB = 1 << 20


def _transient(mb: int, hold_s: float = 0.0) -> None:
    a = np.ones(mb * MB // 8)  # touched pages: resident
    time.sleep(hold_s)
    del a


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
