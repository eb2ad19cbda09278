"""Issue #45: bench's timed children run under the allocator a training process has. The batch search's
setting (every large block mmapped and returned on free, so a trial's RSS falls) made every large
tensor of every timed step a fresh mapping whose pages faulted in again: a small MLP's fp32 step took
5.5 ms of CPU in bench's child and 3.0 ms in a hand loop, pulling every speedup towards 1."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ampkit.bench import runner

FAULTS = r"""
import os, resource, sys
import numpy as np
from ampkit.host_memory import heap_for_timing
if sys.argv[1] == "relaxed":
    assert heap_for_timing()
def cycle():
    a = np.ones(1 << 18, dtype=np.float32)  # 1 MiB: above the search's 128 KiB threshold
    return float(a[::4096].sum())
for _ in range(5):
    cycle()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    cycle()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and page-fault counts")
def test_after_the_search_large_blocks_stay_on_the_heap():
    env = {**os.environ, **runner.SEARCH_ENV}
    faults = {how: int(subprocess.run([sys.executable, "-c", FAULTS, how], env=env, capture_output=True, text=True,
                                      check=True).stdout) for how in ("search", "relaxed")}
    assert faults["search"] >= 50 * 200  # 256 pages of a fresh mapping fault in at every cycle
    assert faults["relaxed"] < 200, faults


def _child_env(conn):
    conn.send_bytes(os.environ.get("MALLOC_MMAP_THRESHOLD_", "").encode())
    conn.close()


@pytest.mark.parametrize("search", [False, True])
def test_only_a_searching_child_gets_the_searchs_allocator(search):
    proc, recv = runner.spawn(_child_env, (), search=search)
    got = recv.recv_bytes().decode()
    proc.join(30)
    assert got == (runner.SEARCH_ENV["MALLOC_MMAP_THRESHOLD_"] if search else "")
    assert "MALLOC_MMAP_THRESHOLD_" not in os.environ  # the parent's own environment is given back
