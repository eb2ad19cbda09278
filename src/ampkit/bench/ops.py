"""What bench's driver (:mod:`ampkit.bench.driver`) asks of a framework backend: small typed operations.

Part of :class:`ampkit.backends.base.Backend`; the flow around them is the driver's, written once:
the default workload, the CPU rule for ``--batch-size auto``, isolating a user's model, ``auto``,
one fresh process per mode, ``--repeats``, the report. A backend answers three questions and
states one fact:

- :meth:`BenchOps.bench_start`: anything this process must do first, and whether a launcher
  (torchrun) made it one of a group that measures every mode together;
- :meth:`BenchOps.bench_probe`: build the workload once -- its name, FLOPs, input shapes, default
  batch -- and, for a user's ``--model``, train one step on a probe batch of 2;
- :meth:`BenchOps.bench_open`: one mode's model, built in the fresh child the driver started for it,
  as a :class:`BenchSession` that trains blocks of steps when told and returns their times, then a
  :class:`Measured` (peak memory, losses, skipped steps, the profiled breakdown). The backend
  measures; the neutral layer (:mod:`.rows`, :mod:`.runner`) decides the blocks -- one run, or
  rounds interleaved with the other modes' children (:mod:`.rounds`) -- and turns the times and
  the measurement into the row, its verdict and its explanation, once for every framework;
- :attr:`BenchOps.bench_searches_in_child`: whether that child can run ``--batch-size auto``'s
  search itself, or each trial needs a fresh process of its own.

Optional operations are declared here with a default that says what a backend without them gets
(a class deriving from :class:`~ampkit.backends.base.Backend` inherits them): ``bench_strategies``
(none: ``--strategy`` is refused with the reason), ``bench_probe_fork`` (False: the probe's child is
spawned), ``bench_size_work`` (None: ``--explain``
rows carry no size table), ``bench_threads`` (the thread count left as it is) and
``bench_doctor_verdict`` (None: nothing to reconcile with).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..breakdown import Breakdown
    from ..doctor.ops import Work
    from ..target import Target
    from .config import BenchConfig

#: progress(kind, done, total) from a measuring backend: kind "step" (done of total steps) or
#: "search" (done = the batch size being tried, total None)
Progress = Callable[[str, int, "int | None"], None]


@dataclass(frozen=True)
class ModelProbe:
    """What building the workload once tells the driver, before any mode runs."""

    name: str                                # the workload's name in reports ("mlp", "mymodels:build")
    flops_per_sample: float | None           # training FLOPs per sample (TFLOP/s, MFU); None: unknown
    sample_inputs: object = None             # per-sample input shape(s), e.g. [3, 32, 32] or {"input_ids": [128]}
    batch_size: int = 32                     # the workload's default batch: where --batch-size auto starts
    environment: dict = field(default_factory=dict)  # what only the model tells (Keras: which Keras built it),
    #                                                  laid over the backend's environment section
    matmuls: list | None = None              # one step's matmuls at the run's batch, {"m", "n", "k", "calls"}, largest
    #                                          first (what bench compares with the doctor's size table); None: unknown
    input: dict | None = None                # --data: the user's batch that was timed ({"kind": "data", "shape", ...})


class ProbeStepFailed(Exception):
    """Raised by :meth:`BenchOps.bench_probe` when a user's model fails its probe training step.

    ``detail``: what failed, in one line ("RuntimeError: mat1 and mat2 shapes cannot be multiplied");
    ``num_classes``: the classes the probe's targets used. The driver turns it into the one
    usage-error line every framework shares."""

    def __init__(self, detail: str, num_classes: int | None, outputs: int | None = None):
        super().__init__(detail)
        self.detail = detail
        self.num_classes = num_classes
        self.outputs = outputs  # the model's outputs per sample, where the probe saw them (the --num-classes hint)


@dataclass(frozen=True)
class BenchGroup:
    """The processes a launcher (torchrun) started, which measure each mode together (DDP)."""

    target: Target       # this process's device
    world_size: int
    rank: int


@dataclass(frozen=True)
class MeasureRequest:
    """One mode to measure.

    ``config.batch_size``: an int, None (the workload's default), or ``"auto"`` only for a backend
    whose :attr:`~BenchOps.bench_searches_in_child` is true (the driver searches for the others);
    ``config.workload`` is the built-in that runs (the default already filled in)."""

    config: BenchConfig
    mode: str
    target: Target
    flops_per_sample: float | None = None
    group: BenchGroup | None = None  # set: measure in this process, across the group (global figures)


@dataclass(frozen=True)
class SizeWork:
    """How a backend times ``--explain``'s size table (the doctor's matmul against fp32's at small,
    medium and large sizes, :mod:`ampkit.doctor.sizes`), which the driver measures in the child
    that measured the row: ``work_at(mode, n)`` is a Work whose one kernel is an ``n``-square matmul
    in the mode's math, timed inside ``scope()`` (one thread on a CPU); ``source`` says so in words."""

    work_at: Callable[[str, int], Work]
    source: str
    scope: Callable[[], AbstractContextManager] = contextlib.nullcontext


@dataclass
class Measured:
    """What a :class:`BenchSession` measured besides the step times the neutral layer asked for."""

    peak_memory_bytes: int | None = None
    memory_source: str | None = None
    skipped_steps: int = 0              # timed steps the loss scaler skipped
    warmup_skipped_steps: int = 0       # untimed (warm-up) steps it skipped
    first_loss: float | None = None     # the loss of the first step (before any update)
    final_loss: float = float("nan")    # the loss of the last step
    breakdown: Breakdown | None = None  # --explain: the profiled steps (:mod:`ampkit.breakdown`)
    graph_breaks: int | None = None     # --compile: the framework's counters, where it has them
    recompiles: int | None = None
    graph_break_reasons: list = field(default_factory=list)


class BenchSession:
    """One mode's model, built and ready in this process (:meth:`BenchOps.bench_open`).

    The neutral layer calls :meth:`begin` once (after ``--batch-size auto``'s :meth:`trial` calls,
    where the backend searches in this child), then :meth:`steps` as often as its plan says (the
    warm-up, then one block per round), then :meth:`finish`, then :meth:`close` (always). Every
    call may raise: the neutral layer turns the exception into the row's status."""

    #: the workload's default batch (what runs when the config names none)
    default_batch: int = 32
    #: what describes the row before anything runs: ``device_name``, ``emulated`` (fp8 emulation),
    #: ``replicas`` (devices in sync), ``compiled``; ``threads``, the CPU threads the timed steps ran on
    facts: dict

    def trial(self, batch_size: int) -> tuple[bool, int | None]:
        """``--batch-size auto`` (``bench_searches_in_child``): a short run at ``batch_size`` -> (ran
        without running out of memory, its peak bytes); the model's weights restored afterwards."""
        raise NotImplementedError

    def begin(self, batch_size: int) -> None:
        """The measured run starts: its fixed batch, its optimizer, the peak-memory region."""
        raise NotImplementedError

    def steps(self, n: int, timed: bool, on_step: Callable[[], None] | None = None) -> list[float]:
        """``n`` training steps on the fixed batch; returns when they have finished (one device sync at
        the block's end), with each step's seconds when ``timed`` (a GPU: its events) else []."""
        raise NotImplementedError

    def finish(self, profile_steps: int = 0) -> Measured:
        """The run ends: the peak region closes, then ``profile_steps`` > 0 (``--explain``) more steps
        are profiled into the breakdown."""
        raise NotImplementedError

    def close(self) -> None:
        """Free what the session holds (called whatever happened)."""

    def reduce(self, step_s: float, peak: int, ok: bool, world: int) -> tuple[float, int, bool]:
        """Under a launcher: the group's (slowest step time, largest peak, every rank ok)."""
        return step_s, peak, ok


@runtime_checkable
class BenchOps(Protocol):
    #: True: the child measuring a mode runs --batch-size auto's search itself (its framework hands
    #: a trial's memory back); False: the driver runs each trial in a fresh child of its own
    bench_searches_in_child: bool

    def bench_start(self, config: BenchConfig) -> BenchGroup | None:
        """Called first, in the parent, once: prepare this process (e.g. leave GPU memory to the
        children) and, under a launcher with more than one process, join its group and return it."""

    def bench_probe(self, config: BenchConfig, target: Target) -> ModelProbe:
        """Build the workload (on the host) and describe it; for a user's ``--model``, one training
        step on a probe batch of 2 (:class:`ProbeStepFailed` when it fails). The driver runs it in
        an isolated child for a ``--model``. Bad input (a size flag the workload does not take) is a
        :class:`~ampkit.errors.UsageError`."""

    def bench_open(self, request: MeasureRequest) -> BenchSession:
        """Build one mode's model for :class:`BenchSession`'s calls. A mode this device or model
        cannot run raises :class:`~ampkit.errors.ModeUnavailableError` (the row: unsupported); an
        out-of-memory error or any other exception becomes the row's status (never a crash)."""

    # ---------------------------------------------------------------- optional, declared with their defaults
    #: ``--strategy`` names this backend distributes with in one process (tf.distribute's); none by default
    bench_strategies: tuple[str, ...] = ()

    def bench_probe_fork(self, target: Target) -> bool:
        """Whether the isolated child probing a ``--model`` may be forked from this process instead of
        spawned: only where that is safe (one thread, no device runtime initialized here) and saves the
        child the framework's import. The default: spawned, as every other child."""
        return False

    def bench_threads(self, target: Target, threads: int | None) -> AbstractContextManager:
        """The scope a mode is measured in (in its child) with ``threads`` CPU threads
        (``config.threads``, :mod:`ampkit.threads`; None: the framework's count stays); the driver
        also resolves ``auto`` and reads the environment inside it. The default changes nothing: a
        backend without threads of its own (plain Python) times as it is."""
        return contextlib.nullcontext()

    def bench_doctor_verdict(self, target: Target) -> dict | None:
        """The doctor's measured verdict cached for this environment (an :mod:`ampkit.auto_cache`
        entry), which bench's last line reconciles with (:mod:`ampkit.bench.doctor_check`); None
        (the default): no doctor to compare with."""
        return None

    def bench_size_work(self, target: Target) -> SizeWork | None:
        """``--explain``'s size table, timed by the driver after the session's rows; None (the
        default): this backend measures no size table, and its rows say nothing about sizes."""
        return None
