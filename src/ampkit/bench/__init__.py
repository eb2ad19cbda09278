"""``ampkit bench``: training steps side by side in every mode.

The module itself is callable: ``ampkit.bench(workload="cnn", modes="fp32,bf16", steps=10)`` runs
the same bench as the command and returns its :class:`~ampkit.bench.report.BenchReport`
(``help(ampkit.bench)`` and ``inspect.signature(ampkit.bench)`` show the parameters).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

from .._callable import make_callable

if TYPE_CHECKING:
    from .report import BenchReport

__all__ = ["BenchReport", "BenchRow", "bench"]


def bench(workload: str | None = None, *, model: str | None = None, input_shape=None, num_classes: int | None = None,
          modes="all", batch_size: int | str | None = None, memory_budget: int | str | None = None, steps: int = 20,
          warmup: int = 5, repeats: int = 1, seq_len: int | None = None, image_size: int | None = None,
          framework: str = "auto", device: str = "auto", timeout: float | None = 1800.0, progress=None,
          explain: bool = False, compile: str = "off", strategy: str | None = None,
          replicas: int | None = None, plan=None, threads: int | None = None, data: str | None = None) -> BenchReport:
    """Train the same model on the same batch in each mode, each mode in a fresh process.

    The processes are *spawned* (Python's ``multiprocessing`` "spawn"); they do not re-run the calling
    script, so no ``if __name__ == "__main__":`` guard is needed (ampkit.isolation.main_not_rerun).

    Args:
        workload: a built-in workload (``mlp``, ``cnn``, ``resnet50``, ``vit_b_16``, ``bert-base``,
            ``gpt2``); default: ``mlp`` on a CPU, ``resnet50`` on a GPU.
        model: ``"MODULE:FACTORY"`` instead of a workload (a zero-argument factory returning an
            ``ampkit.Workload`` or a model; a bare model needs ``input_shape``).
        input_shape, num_classes: per-sample input shape and classes for a bare model.
        data: ``"MODULE:FACTORY"`` (or ``"PATH/TO/FILE.py:FACTORY"``) of your data, with ``model``: a
            real batch of it is timed instead of random inputs (PyTorch); the report's ``input`` says
            its shape.
        modes: a list or comma string of modes (``auto`` allowed), or ``"all"``.
        batch_size: per-step batch size, ``"auto"`` (the largest that fits; on a CPU with
            ``memory_budget``), or None for the workload's default.
        memory_budget: bytes or a size string such as ``"2GiB"`` (implies ``batch_size="auto"``).
        steps, warmup: timed steps and untimed warm-up steps per mode.
        repeats: run the mode sequence this many times, interleaved (medians, paired interval).
        seq_len, image_size: the input size of a built-in sequence or image workload.
        framework: ``auto`` (default: the model's framework, from what ``model``'s factory returns,
            called once in a child process when both frameworks are installed; for a built-in
            workload torch when it can be imported, else tensorflow), ``torch`` or ``tensorflow``
            (any other name: a :class:`~ampkit.errors.UsageError`, a ``ValueError``).
        device: ``auto``, ``cpu``, ``cuda[:N]``.
        timeout: seconds per mode before its process is stopped (None: no limit).
        progress: ``progress(message: dict)``, called with ``{"mode", "kind", ...}`` as modes run; in a
            Jupyter kernel the default (None) shows one display in the cell that updates as steps
            finish (:mod:`ampkit.progress`); ``False`` shows nothing.
        explain: profile a few more steps per mode: each row gains ``breakdown`` (its step's share
            per category), ``breakdown_ms`` and ``explanation`` (why it is faster or slower than fp32).
        compile: ``"off"``, ``"on"`` (torch.compile / Keras ``jit_compile=True`` in every mode) or
            ``"both"`` (eager rows, then compiled ones): rows gain ``compiled``, ``compile_s``,
            ``graph_breaks``, ``recompiles`` (and ``speedup_vs_eager`` with both).
        strategy: ``"mirrored"`` (Keras only): every mode under ``tf.distribute.MirroredStrategy`` over
            the local GPUs; rows and the document gain ``replicas`` and ``batch_size`` is the global batch.
        replicas: with ``strategy`` on a CPU, this many logical CPU devices (for testing a strategy).
        plan: a precision plan (a path or the dict of ``ampkit audit --plan`` / ``ampkit plan``), run as
            one more mode ``plan:<default>`` with ``"plan"`` attached to its row.
        threads: the CPU threads every mode is timed with (``--threads``); None: one on a CPU, the
            doctor's default too (:mod:`ampkit.threads`); a GPU run keeps the framework's count.
            ``environment.cpu.threads`` says the count.

    Returns:
        BenchReport: one row per mode (``.results``: samples/s, step times, peak memory, speedup
        vs fp32 with its interval and words, skipped steps, flags); ``.to_dict()`` is the JSON
        document ``ampkit bench --json`` writes.
    """
    from ..progress import shown
    from . import driver
    from .config import BenchConfig

    cfg = BenchConfig(workload=workload, model=model, input_shape=input_shape, num_classes=num_classes, modes=modes,
                      batch_size=batch_size, memory_budget=memory_budget, steps=steps, warmup=warmup, repeats=repeats,
                      seq_len=seq_len, image_size=image_size, device=device, timeout=timeout, explain=explain,
                      compile=compile, strategy=strategy, replicas=replicas, plan=plan, threads=threads, data=data)
    framework = _framework(framework, cfg)
    return shown(progress, f"bench {workload or model or ''}".strip(), "bench", lambda cb, live: driver.run(
        cfg, framework, progress=cb, on_row=live.row if live else None))


def _framework(framework, cfg):
    """A framework name checked (a Backend object passes as it is); ``auto`` with a ``model`` is the
    framework of what its factory returns, asked in a child like the probe (its crash or hang is one
    line), only when both frameworks are installed."""
    if not (isinstance(framework, str) or framework is None) and hasattr(framework, "target"):
        return framework  # a Backend
    from ..registry import auto_has_choice, factory_framework, parse_framework

    framework = parse_framework(framework)
    if framework == "auto" and cfg.model and auto_has_choice():
        from ..isolation import run_isolated

        framework = run_isolated(factory_framework, cfg.model, what=f"probing --model {cfg.model}",
                                 timeout=cfg.timeout) or framework
    return framework


make_callable(__name__, bench, ("report",))
#: ``inspect.signature(ampkit.bench)`` (the module is callable) is the function's, not ``(*args, **kwargs)``
__signature__ = inspect.signature(bench)
