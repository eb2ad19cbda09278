"""torch.compile for ``bench --compile`` (and the engine's tests): availability, compiling, dynamo's counters."""

from __future__ import annotations

import os
import shutil

import torch

_COMPILERS = ("g++", "c++", "clang++")


def compile_unavailable(device: torch.device) -> str | None:
    """None where torch.compile's default backend can build kernels for ``device``; else why not."""
    if device.type == "cuda":
        try:
            import triton  # noqa: F401
        except ImportError:
            return "compile unavailable: inductor builds Triton kernels on CUDA and the triton package is not installed"
        return None
    try:  # inductor's own search ($CXX, else g++ only; each must answer --version): c++ or clang++ alone fail it
        from torch._inductor.cpp_builder import get_cpp_compiler
    except ImportError:  # another torch: the same idea by hand
        cxx = os.environ.get("CXX")
        if (cxx and shutil.which(cxx)) or any(shutil.which(c) for c in _COMPILERS):
            return None
    else:
        try:
            get_cpp_compiler()
            return None
        except Exception:  # InvalidCxxCompiler and what a broken $CXX raises
            pass
    cxx = os.environ.get("CXX")
    return ("compile unavailable: inductor builds C++ kernels on a CPU and found no working C++ compiler ("
            + (f"$CXX={cxx!r} does not run" if cxx else "it looks for $CXX, else g++") + "); install one (e.g. "
            "apt-get install g++) or set CXX")


def compile_model(model: torch.nn.Module) -> torch.nn.Module:
    """``torch.compile(model)`` with the default backend (inductor), dynamo's caches reset first.
    Inductor's compile workers are shut down when this (child) process ends."""
    from ...isolation import at_child_exit

    torch._dynamo.reset()
    at_child_exit(_shutdown_compile_workers)
    return torch.compile(model)


def _shutdown_compile_workers() -> None:
    """Stop inductor's worker pool: left to ``os._exit``, its semaphore is reported as leaked by
    multiprocessing's resource tracker after ampkit's last line (issue #40)."""
    from torch._inductor.async_compile import shutdown_compile_workers

    shutdown_compile_workers()


class DynamoCounters:
    """``with DynamoCounters() as c: ...`` -> ``c.graph_breaks``, ``c.recompiles``, ``c.reasons``."""

    def __init__(self, keep_reasons: int = 5):
        self.keep = keep_reasons
        self.graph_breaks = self.recompiles = 0
        self.reasons: list[str] = []

    def __enter__(self) -> DynamoCounters:
        from torch._dynamo.utils import counters

        counters.clear()
        return self

    def read(self) -> None:
        from torch._dynamo.utils import counters

        breaks = counters.get("graph_break", {})
        self.graph_breaks = int(sum(breaks.values()))
        self.reasons = [str(r).splitlines()[0][:300] for r in list(breaks)[: self.keep]]
        frames = int(counters.get("frames", {}).get("total", 0))
        failed = frames - int(counters.get("frames", {}).get("ok", 0))
        if failed > 0:  # a frame dynamo gave up on runs eagerly, uncounted in graph_break: a silent fallback
            self.graph_breaks += failed
            gave_up = [_why(str(r)) for r in counters.get("unimplemented", {})]
            self.reasons += [f"dynamo compiled no graph for {failed} frame(s), which ran eagerly"
                             + (f": {gave_up[0][:250]}" if gave_up else "")]
        resumes = int(sum(counters.get("resumes", {}).values()))
        self.recompiles = max(0, frames - 1 - resumes) if frames else 0

    def __exit__(self, *exc) -> bool:
        self.read()
        return False


def _why(reason: str) -> str:
    """Dynamo's first line ("Observed exception") and, where it gives one, its debug context (what was raised)."""
    lines = [ln.strip() for ln in reason.strip().splitlines() if ln.strip()]
    context = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Developer debug context:")), "")
    return (lines[0] if lines else "") + (f" ({context})" if context else "")


class CompileFailed(RuntimeError):
    """torch.compile's backend failed: the row's error names the cause (dynamo's own first line does not)."""

    def __init__(self, exc: BaseException):
        inner = getattr(exc, "inner_exception", None) or exc.__cause__ or exc
        line = str(inner).strip().splitlines()[0] if str(inner).strip() else ""
        super().__init__(f"torch.compile failed ({getattr(exc, 'backend_name', 'its backend')}): "
                         f"{type(inner).__name__}: {line}")
