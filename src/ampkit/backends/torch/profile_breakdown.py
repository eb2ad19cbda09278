"""``bench --explain`` for PyTorch: a few training steps under ``torch.profiler``, grouped into
:data:`ampkit.breakdown.CATEGORIES`."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ...breakdown import Breakdown, from_op_times, top_matmuls

_MATMUL = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "addmv", "mv", "dot", "einsum", "_scaled_mm",
           "mkldnn_linear", "_addmm_activation", "mkldnn_matmul"}
_MATMUL_PREFIX = ("conv", "_conv", "mkldnn_conv", "cudnn_conv", "slow_conv", "thnn_conv", "miopen_conv",
                  "_scaled_dot_product", "scaled_dot_product", "_flash_attention", "_efficient_attention",
                  "_nnpack_spatial_conv", "_slow_conv")
#: matmul entry points autocast casts the inputs of (their children's casts are casts, not matmul work)
_WRAPPERS = {"linear", "matmul", "einsum", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
             "conv_transpose3d", "scaled_dot_product_attention", "conv_tbc"}
#: forward convolutions whose inputs are (input NCHW, weight OIHW): their matmul dimensions are read
_CONV_FORWARD = {"convolution", "_convolution", "mkldnn_convolution", "cudnn_convolution", "_slow_conv2d_forward",
                 "slow_conv2d_forward", "thnn_conv2d", "_nnpack_spatial_convolution", "miopen_convolution",
                 "_mps_convolution"}
_CASTS = {"to", "_to_copy", "copy_", "_autocast_to_reduced_precision", "_autocast_to_full_precision", "type_as",
          "contiguous", "clone", "_copy_from", "_copy_from_and_resize"}
_LOSS_SCALING = {"_amp_foreach_non_finite_check_and_unscale_", "_amp_non_finite_check_and_unscale_",
                 "_amp_update_scale_", "_local_scalar_dense", "item", "isfinite", "isinf", "isnan"}
#: ops that move no data: views, allocation, metadata (framework overhead, like the wrappers)
_BOOKKEEPING = {"empty", "empty_strided", "empty_like", "view", "_unsafe_view", "as_strided", "t", "transpose",
                "reshape", "expand", "detach", "detach_", "alias", "permute", "squeeze", "unsqueeze", "slice",
                "select", "resize_", "result_type", "lift_fresh", "_reshape_alias", "numpy_T", "flatten",
                "unflatten", "narrow", "split", "chunk", "unbind", "zeros", "ones", "full", "scalar_tensor",
                "set_", "record_stream", "_has_compatible_shallow_copy_type", "is_nonzero"}
_OPTIMIZER_SCOPES = ("Optimizer.step", "Optimizer.zero_grad")
_SCALER_SCOPES = ("GradScaler", "_amp_")


@dataclass(frozen=True)
class OpTime:
    """One profiled op: ``self_ms`` on the host, ``device_ms`` of the kernels it launched (GPU)."""

    name: str                        # "aten::addmm"
    self_ms: float
    scopes: tuple[str, ...] = ()     # the names of the ops/record_function ranges around it, outermost first
    shapes: tuple = ()               # input shapes, as the profiler recorded them
    device_ms: float = 0.0


def _base(name: str) -> str:
    return name.split("::", 1)[1] if name.startswith("aten::") else name


def _is_matmul(base: str) -> bool:
    return base in _MATMUL or base.startswith(_MATMUL_PREFIX)


def category(op: OpTime) -> str:
    """The op's category: by the scope it ran in, then by its name."""
    base = _base(op.name)
    if base in _LOSS_SCALING or any(s.startswith(_SCALER_SCOPES) or "_amp_" in s for s in op.scopes):
        return "loss_scaling"
    if op.name.startswith(_OPTIMIZER_SCOPES) or any(s.startswith(_OPTIMIZER_SCOPES) for s in op.scopes):
        return "optimizer"
    if base.startswith("_foreach_") or base.startswith("_fused_adam") or base.startswith("_fused_sgd"):
        return "optimizer"
    if not op.name.startswith("aten::"):
        return "other"  # autograd wrappers, record_function ranges: framework overhead
    parent = _base(next((s for s in reversed(op.scopes) if s.startswith("aten::")), ""))
    if _is_matmul(base) or (_is_matmul(parent) and parent not in _WRAPPERS):
        return "matmul_conv"  # a matmul's own copies (addmm writes its bias into the output) are the matmul's
    if base in _CASTS:
        return "casts"
    if base in _BOOKKEEPING:
        return "other"
    return "elementwise_norm"


def matmul_dims(op: OpTime) -> tuple[int, int, int] | None:
    """``(m, n, k)`` of a matmul or convolution from its recorded input shapes (a convolution as the
    matmul it lowers to: m = batch x output pixels, n = output channels, k = input channels x kernel)."""
    base, s = _base(op.name), [list(x) for x in op.shapes if isinstance(x, (list, tuple))]
    try:
        if base == "mm" and len(s) >= 2 and len(s[0]) == 2:
            return s[0][0], s[1][1], s[0][1]
        if base == "addmm" and len(s) >= 3 and len(s[1]) == 2:
            return s[1][0], s[2][1], s[1][1]
        if base in ("bmm", "baddbmm") and len(s) >= 2:
            a, b = (s[0], s[1]) if base == "bmm" else (s[1], s[2])
            return a[0] * a[1], b[2], a[2]
        if base in _CONV_FORWARD and len(s) >= 2 and len(s[0]) == 4 and len(s[1]) == 4:
            x, w = s[0], s[1]
            return x[0] * x[2] * x[3], w[0], w[1] * w[2] * w[3]
    except (IndexError, TypeError):
        return None
    return None


def summarize(ops: Iterable[OpTime], step_ms: float, steps: int, *, gpu: bool, source: str,
              approximate: str | None = None) -> Breakdown:
    """Per-step milliseconds per category (host self time on a CPU, kernel time on a GPU), the
    model's matmul shapes, as a :class:`~ampkit.breakdown.Breakdown` of one step."""
    ms: dict[str, float] = {}
    shapes = []
    for op in ops:
        t = op.device_ms if gpu else op.self_ms
        cat = category(op)
        ms[cat] = ms.get(cat, 0.0) + t / steps
        if cat == "matmul_conv":
            dims = matmul_dims(op)
            if dims:
                shapes.append((*dims, t / steps))
    busy = sum(ms.values()) if gpu else None
    return from_op_times(ms, step_ms, steps, source, gpu=gpu, device_busy_ms=busy, matmuls=top_matmuls(shapes, steps=steps),
                         approximate=approximate)


def _scopes(ev) -> tuple[str, ...]:
    names = []
    p = ev.cpu_parent
    while p is not None:
        names.append(p.name)
        p = p.cpu_parent
    return tuple(reversed(names))


def _device_ms(ev) -> float:
    us = getattr(ev, "self_device_time_total", None)
    if us is None:
        us = getattr(ev, "self_cuda_time_total", 0.0)
    return float(us or 0.0) / 1e3


#: what libkineto writes to the process's stderr on every profile (and, on a machine without a GPU,
#: an "ERROR ... gpuGetDeviceCount failed" that is no error of the run): dropped; anything else is kept
_KINETO_NOISE = re.compile(r"^(USDT:.*(profiler_start|profiler_stop)|ERROR:.*gpuGetDeviceCount failed.*|"
                           r"(STAGE|INFO|WARNING):.*(ActivityProfiler|CuptiActivityApi|Kineto).*)$")


@contextlib.contextmanager
def _quiet_kineto():
    """Native stderr (fd 2) captured while the profiler runs; its lines written back, less kineto's noise."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # no real stderr (a notebook): nothing to filter
        yield
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile(mode="w+b") as buf:
        os.dup2(buf.fileno(), fd)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            buf.seek(0)
            kept = [ln for ln in buf.read().decode(errors="replace").splitlines() if not _KINETO_NOISE.match(ln)]
            if kept:
                sys.stderr.write("\n".join(kept) + "\n")


def profile_steps(step: Callable[[], object], steps: int, device) -> Breakdown:
    """Run ``step`` ``steps`` times under ``torch.profiler`` (shapes recorded) and summarise."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    gpu = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    with _quiet_kineto(), profile(activities=activities, record_shapes=True) as prof:
        if gpu:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        if gpu:
            torch.cuda.synchronize(device)
        wall_ms = (time.perf_counter() - t0) * 1e3 / steps
    ops = [OpTime(ev.name, float(ev.self_cpu_time_total) / 1e3, _scopes(ev), tuple(ev.input_shapes or ()),
                  _device_ms(ev) if gpu else 0.0) for ev in prof.events()]
    source = ("torch.profiler: kernel time per op on the GPU, host_idle = step wall time - kernel time" if gpu
              else "torch.profiler: host self time per op; the step's time no op covers is 'other'")
    return summarize(ops, wall_ms, steps, gpu=gpu, source=source)
