"""``ampkit bench`` for PyTorch: :class:`ampkit.bench.ops.BenchOps`'s operations.

Build and probe the workload; open one mode as a :class:`TorchSession` that trains blocks of steps
through ``ampkit.MixedPrecision`` (so fp16 includes GradScaler's cost) and measures them. The rows,
verdicts and explanations, the blocks and rounds, ``--batch-size auto``'s search, the default
workload, isolating a user's model, ``auto``, a child per mode, repeats, the report -- are the
neutral layer's (:mod:`ampkit.bench.driver`, :mod:`ampkit.bench.session`, :mod:`ampkit.bench.rows`).
"""

from __future__ import annotations

import os

import torch

from ...bench.config import BenchConfig
from ...bench.ops import BenchGroup, BenchSession, Measured, MeasureRequest, ModelProbe, ProbeStepFailed, SizeWork
from ...errors import ModeUnavailableError, UsageError
from ...host_memory import is_oom
from . import compiled
from .devices import mode_support
from .engine import MixedPrecision
from .engine.islands import check_plan
from .measure import TrainingRun, free_memory, measure, rss_baseline
from .workloads import build_workload
from .workloads.flops import count_training_flops, matmul_shapes


def _build(cfg: BenchConfig, device: torch.device):
    fed = None
    if cfg.data:  # --data: a real batch of the user's data, not random inputs
        from .data_batch import DataBatches, data_workload

        def fed(obj):
            bs = cfg.batch_size if isinstance(cfg.batch_size, int) else 32  # the timed batch, described
            return data_workload(obj, cfg.model, DataBatches(cfg.data, bs))
    return build_workload(cfg.workload, cfg.model, cfg.input_shape, cfg.num_classes, device, seed=cfg.seed,
                          seq_len=cfg.seq_len, image_size=cfg.image_size, fed=fed)


def sample_shapes(inputs):
    """Per-sample shapes of a batch's inputs (batch dimension dropped): a list, or a dict/list of them."""
    if isinstance(inputs, torch.Tensor):
        return list(inputs.shape[1:])
    if isinstance(inputs, dict):
        return {k: sample_shapes(v) for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    if isinstance(inputs, (tuple, list)):
        return [sample_shapes(v) for v in inputs if isinstance(v, torch.Tensor)]
    return None


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    from ...cpu import cpu_info

    return cpu_info()["model"]


class TorchSession(BenchSession):
    """One mode's workload on ``device`` (:class:`ampkit.bench.ops.BenchSession`): built, compiled
    with ``--compile on``, wrapped in DDP under a launcher; trained through ``ampkit.MixedPrecision``
    (so fp16 includes GradScaler's cost) in the blocks the neutral layer asks for."""

    def __init__(self, request: MeasureRequest):
        cfg, mode = request.config, request.mode
        self.cfg, self.device, self.group = cfg, torch.device(request.target.device), request.group
        self.plan, self.mode = (cfg.plan, cfg.plan["default"]) if mode.startswith("plan:") and cfg.plan else (None, mode)
        self.facts = {"device_name": device_name(self.device), "compiled": cfg.compile == "on"}
        self.run = self._counters = self._initial = None
        ok, why = mode_support(self.mode, self.device)
        if self.mode == "fp8":  # trained through torchao: real fp8 kernels, or its emulation
            from .engine.fp8 import fp8_support

            ok, self.facts["emulated"], why = fp8_support(self.device)
        if not ok:
            raise ModeUnavailableError(why)
        if cfg.compile == "on":
            why = compiled.compile_unavailable(self.device)
            if why:
                raise ModeUnavailableError(why)
        self.baseline = rss_baseline(self.mode, self.device) if self.device.type == "cpu" else 0
        self.workload = _build(cfg, self.device)
        self.default_batch = self.workload.batch_size
        if self.group is not None:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.workload.model = DistributedDataParallel(self.workload.model, device_ids=ids)
        if cfg.compile == "on":
            self.workload.model = compiled.compile_model(self.workload.model)
            self._counters = compiled.DynamoCounters().__enter__()

    def trial(self, batch_size: int) -> tuple[bool, int | None]:
        """A short run in this process (torch returns its memory); the weights restored at :meth:`begin`."""
        if self._initial is None:
            self._initial = {k: v.detach().to("cpu", copy=True) for k, v in self.workload.model.state_dict().items()}
        try:
            m = measure(self.workload, self.mode, self.device, batch_size, steps=2, warmup=1, seed=self.cfg.seed,
                        baseline_rss=self.baseline)
            return True, m.peak_memory_bytes
        except Exception as exc:
            if not is_oom(exc):
                raise
            return False, None
        finally:
            free_memory(self.device)

    def begin(self, batch_size: int) -> None:
        if self._initial is not None:  # measure from the same initial weights as the other modes
            self.workload.model.load_state_dict(self._initial)
            self._initial = None
        model = self.workload.model
        mp = (MixedPrecision.from_plan(self.plan, self.device, model=model) if self.plan
              else MixedPrecision(self.mode, self.device, model=model))
        self.run = TrainingRun(self.workload, self.mode, self.device, batch_size, seed=self.cfg.seed,
                               baseline_rss=self.baseline, mp=mp).__enter__()

    def steps(self, n: int, timed: bool, on_step=None) -> list[float]:
        if timed and self.device.type == "cpu":  # the count the timed steps really ran at, read here
            self.facts["threads"] = torch.get_num_threads()
        if timed:
            self.facts["clock"] = self.run.clock
        try:
            return self.run.steps(n, timed, on_step)
        except torch._dynamo.exc.BackendCompilerFailed as exc:
            raise compiled.CompileFailed(exc) from exc

    def finish(self, profile_steps: int = 0) -> Measured:
        run = self.run
        run.end_peak()
        m = Measured(run.mem.peak, run.mem.source, run.skipped, run.warmup_skipped, run.first_loss, run.final_loss)
        if self._counters is not None:
            self._counters.read()
            m.graph_breaks, m.recompiles = self._counters.graph_breaks, self._counters.recompiles
            m.graph_break_reasons = self._counters.reasons
        if profile_steps:
            m.breakdown = run.profile(_profiler(self.cfg, self.device, profile_steps))
        return m

    def close(self) -> None:
        if self.run is not None:
            self.run.close()
        free_memory(self.device)

    def reduce(self, step_s: float, peak: int, ok: bool, world: int) -> tuple[float, int, bool]:
        """The group's slowest step, largest peak, and whether every rank is ok (all_reduce)."""
        import torch.distributed as dist

        t = torch.tensor([step_s, float(peak), 1.0 if ok else 0.0], dtype=torch.float64)
        flags = t.clone()
        try:
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            dist.all_reduce(flags, op=dist.ReduceOp.MIN)
        except Exception as exc:  # another rank failed or died: end this rank too, with a message
            raise UsageError(f"rank {dist.get_rank()} of {world}: another rank stopped answering during {self.mode} "
                             f"({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}); "
                             "see the other ranks' messages") from None
        return float(t[0]), int(t[1]), bool(flags[2] > 0)


def _profiler(cfg: BenchConfig, device: torch.device, steps: int):
    """--explain: profile ``steps`` more steps (torch.profiler is imported only here)."""
    from .profile_breakdown import profile_steps

    def run(step):
        load, cpus = (os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0), os.cpu_count() or 1
        if device.type != "cpu" or load <= cpus:
            return profile_steps(step, steps, device)
        if cfg.compile == "on":  # the thread count is a dynamo guard: one thread would recompile in the profile
            got = profile_steps(step, steps, device)
            got.approximate = (f"this CPU was oversubscribed (load {load:.1f} on {cpus} logical CPUs): the compiled "
                               "steps were profiled on every thread (one thread would recompile the model), so "
                               "waits for descheduled threads blur the shares")
            return got
        # an oversubscribed CPU: a multi-threaded op waits for descheduled threads at every barrier, which
        # blurs which category grew; profile on one thread, as the doctor times, and say so
        from .doctor_ops import measuring_threads

        with measuring_threads(device):
            got = profile_steps(step, steps, device)
        got.approximate = (f"this CPU was oversubscribed (load {load:.1f} on {cpus} logical CPUs): the steps were "
                           "profiled on one thread, as the doctor times, so the shares are of a one-thread step")
        return got
    return run


def probe(cfg: BenchConfig) -> ModelProbe:
    """Build the workload on the CPU and count its FLOPs; a user's model must also run on its own
    inputs: the FLOP count (meta device, strict) and a loss on a probe batch of 2."""
    workload = _build(cfg, torch.device("cpu"))
    check_plan(cfg.plan, workload.model)  # --plan: an entry matching no module is one line before any mode runs
    gen = torch.Generator().manual_seed(cfg.seed)
    if cfg.model:
        try:
            counted = count_training_flops(workload, strict=True)
            batch = workload.make_batch(2, torch.device("cpu"), gen)
            with torch.no_grad():  # the meta-device count checks shapes, not values (a class index too large)
                workload.loss(batch)
        except Exception as exc:
            raise ProbeStepFailed(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                                  cfg.num_classes or 10, _outputs_per_sample(workload, cfg, gen)) from None
        flops = workload.flops_per_sample or counted
    else:
        flops = workload.flops_per_sample or count_training_flops(workload)
        batch = workload.make_batch(1, torch.device("cpu"), gen)
    try:
        shapes = sample_shapes(batch[0])
    except Exception:  # a user's batch of another shape: the shapes are information, not a check
        shapes = None
    batch = cfg.batch_size if isinstance(cfg.batch_size, int) else workload.batch_size
    return ModelProbe(workload.name, flops, shapes, workload.batch_size, matmuls=matmul_shapes(workload, batch),
                      input=workload.input if cfg.data else None)


def _outputs_per_sample(workload, cfg: BenchConfig, gen) -> int | None:
    """The last dimension of the model's output on a probe batch (for the --num-classes hint), or None."""
    try:
        with torch.no_grad():
            out = workload.model(workload.make_batch(2, torch.device("cpu"), gen)[0])
        return int(out.shape[-1]) if isinstance(out, torch.Tensor) and out.dim() >= 2 else None
    except Exception:
        return None


def join_group(cfg: BenchConfig, target_of) -> BenchGroup | None:
    """Under torchrun (WORLD_SIZE > 1): this rank's device (cuda:LOCAL_RANK where CUDA is asked for
    and present), the process group joined; None for a single process."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    import torch.distributed as dist

    if cfg.batch_size == "auto":
        raise UsageError("--batch-size auto is not supported under torchrun; give a per-process --batch-size")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    want_cuda = cfg.device in ("auto", "cuda") or cfg.device.startswith("cuda")
    if want_cuda and torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        target = target_of(f"cuda:{local_rank}")
    else:
        target = target_of("cpu" if cfg.device == "auto" else cfg.device)
    if not dist.is_initialized():
        # a rank that fails or dies must end the run on every rank: a collective waits at most this long
        from datetime import timedelta

        dist.init_process_group("nccl" if target.accelerator else "gloo", timeout=timedelta(seconds=cfg.timeout or 1800.0))
    return BenchGroup(target, dist.get_world_size(), dist.get_rank())


class TorchBench:
    """:class:`ampkit.bench.ops.BenchOps` for PyTorch: each mode in the driver's fresh child (or,
    under torchrun, in every rank at once); ``--batch-size auto`` searches inside that child, since
    torch hands a trial's memory back."""

    bench_searches_in_child = True

    def bench_start(self, config: BenchConfig) -> BenchGroup | None:
        return join_group(config, self.target)

    def bench_probe_fork(self, target) -> bool:
        """The ampkit program probing a CPU target on Linux, with no Python thread but its own and CUDA
        not initialized here: the probe's child forks from it with torch already imported (2 s of CPU
        saved a run). No torch op has run in it yet, so no OpenMP pool is forked (numpy's OpenBLAS
        threads are fork-safe). A library caller's process, a GPU target or another thread: spawned."""
        import sys
        import threading

        from ...outputs import owns_process

        return (sys.platform.startswith("linux") and owns_process() and not target.accelerator
                and threading.active_count() == 1 and not torch.cuda.is_initialized())

    def bench_probe(self, config: BenchConfig, target) -> ModelProbe:
        return probe(config)

    def bench_open(self, request: MeasureRequest) -> TorchSession:
        return TorchSession(request)

    def bench_doctor_verdict(self, target):
        from ...auto_cache import load

        return load(self.auto_fingerprint(target))  # the Backend's DoctorOps: the key the doctor cached under

    def bench_threads(self, target, threads):
        from .doctor_ops import measuring_threads

        return measuring_threads(torch.device(target.device), threads)

    def bench_size_work(self, target) -> SizeWork:
        """The doctor's matmul (:func:`.doctor_ops.size_work`), on the row's thread count (the
        doctor's by default, :mod:`ampkit.threads`), the caller's random state untouched."""
        import contextlib

        from .doctor_ops import size_work

        device = torch.device(target.device)

        @contextlib.contextmanager
        def scope():
            with torch.random.fork_rng(devices=[]):
                yield

        on = f" on {torch.get_num_threads()} thread(s)" if device.type == "cpu" else ""
        return SizeWork(lambda mode, n: size_work(mode, device, n), "the doctor's matmul vs fp32, measured in this run" + on,
                        scope)
