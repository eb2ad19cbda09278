"""Issue #45: bench's timed children run under the allocator a training process has. The batch search's
setting (every large block mmapped and returned on free, so a trial's RSS falls) made every large
tensor of every timed step a fresh mapping whose pages faulted in again: a small MLP's fp32 step took
5.5 ms of CPU in bench's child and 3.0 ms in a hand loop, pulling every speedup towards 1. Only a
child that searches ``--batch-size auto`` gets it now."""

from __future__ import annotations

import os

import pytest

from ampkit.bench import runner


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
