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


def test_tensor_bytes_counts_each_storage_once():
    import torch

    from ampkit.backends.torch.measure import tensor_bytes

    model = torch.nn.Linear(100, 10)  # 1010 float32 parameters
    x = torch.zeros(50, 4)
    assert tensor_bytes(model) == 1010 * 4
    model.weight.grad = torch.ones_like(model.weight)
    assert tensor_bytes(model) == 2000 * 4 + 10 * 4  # a gradient counts, once
    assert tensor_bytes(model, model, [x, x[1:], {"again": x.view(200)}]) == 2010 * 4 + 200 * 4  # views share
    sparse = torch.sparse_coo_tensor([[0, 1]], [1.0, 2.0], (4,), check_invariants=True)  # no plain storage: nothing
    assert tensor_bytes(sparse, torch.empty(3, device="meta"), x) == 200 * 4


def test_a_cpu_peak_is_never_below_the_tensors_the_run_held():
    """A process whose heap already has freed room (a long-lived worker: CI once read 0 bytes here)
    can grow its RSS by less than what the run made; the row's peak is at least its weights,
    AdamW state and batch. Planted: a baseline far above the RSS, so the RSS says 0."""
    import torch

    from ampkit.backends.torch.measure import measure, tensor_bytes
    from ampkit.backends.torch.workloads import build_workload

    workload = build_workload("mlp", None, None, 10, torch.device("cpu"))
    params = tensor_bytes(workload.model)
    m = measure(workload, "fp32", torch.device("cpu"), 8, steps=1, warmup=0, baseline_rss=rss_bytes() + (1 << 40))
    assert m.peak_memory_bytes >= 3 * params  # weights, exp_avg, exp_avg_sq (gradients set to None by then)
    assert "at least" in m.memory_source
