"""``ampkit bench`` for PyTorch: :class:`ampkit.bench.ops.BenchOps`'s operations.

Build and probe the workload; measure one mode: find the batch size, train through
``ampkit.MixedPrecision`` (so fp16 includes GradScaler's cost), fill the row. Every failure becomes
the row's status, never a crash. The flow around them -- the default workload, isolating a user's
model, ``auto``, a fresh child per mode, repeats, the report -- is :mod:`ampkit.bench.driver`'s.
"""

from __future__ import annotations

import os

import torch

from ...bench.config import BenchConfig
from ...bench.memory import is_oom
from ...bench.ops import BenchGroup, MeasureRequest, ModelProbe, ProbeStepFailed, SizeWork
from ...bench.report import BenchRow
from ...bench.rows import check_final_loss, describe_failure, fill_flops, fill_timing, search_batch
from ...errors import AutocastDisabledError, ModeUnavailableError, UsageError
from .compiled import CompiledRun
from .devices import mode_support
from .engine import MixedPrecision
from .engine.islands import check_plan
from .measure import free_memory, measure, rss_baseline
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


def run_mode(cfg: BenchConfig, mode: str, device: torch.device, *, flops: float | None,
             progress=None, ddp: bool = False) -> BenchRow:
    row = BenchRow(mode, steps=cfg.steps)
    say = progress or (lambda *a: None)
    plan, mode = (cfg.plan, cfg.plan["default"]) if mode.startswith("plan:") and cfg.plan else (None, mode)
    row.plan = plan  # "plan:<default>": the plan's engine, its default mode's support and figures
    try:
        row.device_name = device_name(device)
        ok, why = mode_support(mode, device)
        if mode == "fp8":  # trained through torchao: real fp8 kernels, or its emulation (row.emulated)
            from .engine.fp8 import fp8_support

            ok, row.emulated, why = fp8_support(device)
        if not ok:
            row.status, row.error = "unsupported", why
            return row
        baseline = rss_baseline(mode, device) if device.type == "cpu" else 0
        workload = _build(cfg, device)
        if ddp:
            from torch.nn.parallel import DistributedDataParallel

            ids = [device.index] if device.type == "cuda" else None
            workload.model = DistributedDataParallel(workload.model, device_ids=ids)
        compiled = CompiledRun(row, cfg.compile == "on", cfg.warmup)  # --compile (.compiled)
        if not compiled.prepare(workload, device):
            return row
        batch_size = cfg.batch_size or workload.batch_size
        if batch_size == "auto":
            batch_size = _search(cfg, workload, mode, device, baseline, row, say)
            if batch_size is None:
                return row
        mp = (MixedPrecision.from_plan(plan, device, model=workload.model) if plan
              else MixedPrecision(mode, device, model=workload.model))
        with compiled:
            m = measure(workload, mode, device, batch_size, steps=cfg.steps, warmup=compiled.warmup, seed=cfg.seed,
                        baseline_rss=baseline, mp=mp, on_step=compiled.on_step(lambda done, total: say("step", done, total)),
                        profile=_profiler(cfg, device) if cfg.explain else None)
        fill_timing(row, batch_size, m.step_s, flops, gpu=device.type == "cuda", warmup=compiled.warmup,
                    skipped=m.skipped_steps, warmup_skipped=m.warmup_skipped_steps, first_loss=m.first_loss)
        row.peak_memory_bytes, row.memory_source = m.peak_memory_bytes, m.memory_source
        check_final_loss(row, m.final_loss, cfg)
        if m.breakdown is not None:  # the size table it cites is the driver's step (bench_size_work)
            from ...bench.breakdown import fill_row

            fill_row(row, m.breakdown)
    except (ModeUnavailableError, AutocastDisabledError) as exc:
        row.status, row.error = "unsupported", str(exc)
    except UsageError:
        raise
    except Exception as exc:
        row.status = "oom" if is_oom(exc) else "error"
        row.error = describe_failure(exc)
    finally:
        free_memory(device)
    return row


def _profiler(cfg: BenchConfig, device: torch.device):
    """--explain: profile a few more steps (torch.profiler is imported only here)."""
    from ...bench.breakdown import explain_steps
    from .profile_breakdown import profile_steps

    def run(step):
        load, cpus = (os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0), os.cpu_count() or 1
        if device.type != "cpu" or load <= cpus:
            return profile_steps(step, explain_steps(cfg.steps), device)
        if cfg.compile == "on":  # the thread count is a dynamo guard: one thread would recompile in the profile
            got = profile_steps(step, explain_steps(cfg.steps), device)
            got.approximate = (f"this CPU was oversubscribed (load {load:.1f} on {cpus} logical CPUs): the compiled "
                               "steps were profiled on every thread (one thread would recompile the model), so "
                               "waits for descheduled threads blur the shares")
            return got
        # an oversubscribed CPU: a multi-threaded op waits for descheduled threads at every barrier, which
        # blurs which category grew; profile on one thread, as the doctor times, and say so
        from .doctor_ops import measuring_threads

        with measuring_threads(device):
            got = profile_steps(step, explain_steps(cfg.steps), device)
        got.approximate = (f"this CPU was oversubscribed (load {load:.1f} on {cpus} logical CPUs): the steps were "
                           "profiled on one thread, as the doctor times, so the shares are of a one-thread step")
        return got
    return run


def _search(cfg, workload, mode, device, baseline, row, say) -> int | None:
    """Largest batch that fits, each trial a short run in this process (torch returns its memory)."""
    initial = {k: v.detach().to("cpu", copy=True) for k, v in workload.model.state_dict().items()}

    def trial(b: int) -> tuple[bool, int | None]:
        try:
            m = measure(workload, mode, device, b, steps=2, warmup=1, seed=cfg.seed, baseline_rss=baseline)
            return True, m.peak_memory_bytes
        except Exception as exc:
            if not is_oom(exc):
                raise
            return False, None
        finally:
            free_memory(device)

    best = search_batch(row, trial, workload.batch_size, cfg.search_cap, cfg.memory_budget, say)
    workload.model.load_state_dict(initial)  # measure from the same initial weights as other modes
    return best


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


def measure_in_group(request: MeasureRequest, progress) -> BenchRow:
    """One mode under DDP in this process; every rank ends with the global figures: the slowest
    rank sets the pace, memory is the largest rank's."""
    import torch.distributed as dist

    device, world = torch.device(request.target.device), request.group.world_size
    row = run_mode(request.config, request.mode, device, flops=request.flops_per_sample, ddp=True, progress=progress)
    t = torch.tensor([(row.batch_size or 0) / row.samples_per_s if row.samples_per_s else float("inf"),
                      float(row.peak_memory_bytes or 0), 1.0 if row.status == "ok" else 0.0], dtype=torch.float64)
    flags = t.clone()
    try:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        dist.all_reduce(flags, op=dist.ReduceOp.MIN)
    except Exception as exc:  # another rank failed or died: end this rank too, with a message
        raise UsageError(f"rank {dist.get_rank()} of {world}: another rank stopped answering during {request.mode} "
                         f"({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}); "
                         "see the other ranks' messages") from None
    if row.status == "ok" and flags[2] > 0:
        row.samples_per_s = (row.batch_size * world) / float(t[0])
        row.peak_memory_bytes = int(t[1])
        fill_flops(row, request.flops_per_sample, device.type == "cuda", world)
    return row


class TorchBench:
    """:class:`ampkit.bench.ops.BenchOps` for PyTorch: each mode in the driver's fresh child (or,
    under torchrun, in every rank at once); ``--batch-size auto`` searches inside that child, since
    torch hands a trial's memory back."""

    bench_searches_in_child = True

    def bench_start(self, config: BenchConfig) -> BenchGroup | None:
        return join_group(config, self.target)

    def bench_probe(self, config: BenchConfig, target) -> ModelProbe:
        return probe(config)

    def bench_measure(self, request: MeasureRequest, progress) -> BenchRow:
        if request.group is not None:
            return measure_in_group(request, progress)
        return run_mode(request.config, request.mode, torch.device(request.target.device),
                        flops=request.flops_per_sample, progress=progress)

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
