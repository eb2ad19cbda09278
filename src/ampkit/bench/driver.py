"""``ampkit bench``'s one flow, for every framework: the backend only answers small questions
(:class:`ampkit.bench.ops.BenchOps`).

1. The built-in workload's name is checked before the framework loads; ``bench_start`` prepares this
   process (and, under torchrun, joins the group); ``--device`` becomes a :class:`~ampkit.target.Target`.
2. No workload named: the device's default runs, and the report's note says so. On a CPU,
   ``--batch-size auto`` needs ``--memory-budget`` (there is no out-of-memory error to stop at).
3. The workload is built once (``bench_probe``): a user's ``--model`` in an isolated child, where
   a crash, ``sys.exit`` or a hang becomes one usage-error line, and a model that cannot train on
   a probe batch of 2 is refused before any mode runs.
4. The thread count is the policy's (:mod:`ampkit.threads`: ``--threads``, else one on a CPU, as
   the doctor times), written into the config the children apply it from; ``auto`` in the modes
   resolves once, here, on that count (:mod:`.repeats`).
5. Each mode runs in a spawned child of its own, all alive at once and timed in alternating rounds
   (:mod:`.interleave`, :mod:`.rounds`: the speedups paired per round), ``--repeats`` whole runs;
   Ctrl-C keeps what finished. ``--batch-size auto`` runs the modes one after another in fresh
   children (:func:`.runner.run_child`: each search needs the device to itself), searching inside
   that child, or with one child per trial for a backend that cannot hand a trial's memory back
   (``bench_searches_in_child``). Under a launcher the modes run in this process, across the group,
   one after another. The document says which (``pairing``) and whether the load changed.
6. The report: rows with their relative figures, auto's row marked, the environment, the config as
   asked plus what the run decided (the workload that ran, the resolved modes, auto's choice), and
   the doctor's cached verdict beside them, read when auto resolved, with any disagreement in words
   (:mod:`.doctor_check`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..errors import UsageError
from ..factory import class_count_hint
from ..target import Target
from ..threads import resolve as resolve_threads
from .compiled import run_variants
from .config import AUTO_BATCH, BenchConfig
from .ops import BenchGroup, MeasureRequest, ModelProbe, ProbeStepFailed
from .repeats import AutoChoice, apply_auto, mark_auto
from .report import BenchReport, BenchRow
from .rounds import INTERLEAVED, SEQUENTIAL, load_change, plan_rounds, process_sets, split_plan
from .runner import child_cpus, mode_progress, run_child, run_modes, search_in_children
from .session import measure_mode

__all__ = ["BenchGroup", "CPU_AUTO_BATCH", "document_config", "probe_model", "run"]

CPU_AUTO_BATCH = ("on a CPU, --batch-size auto needs --memory-budget SIZE (there is no out-of-memory error to stop "
                  "at); e.g. --memory-budget 2GiB")


def run(config: BenchConfig, backend="auto", *, progress: Callable[[dict], None] | None = None,
        on_row: Callable[[BenchRow], None] | None = None) -> BenchReport:
    """Run the bench that ``config`` asks for on ``backend`` (a Backend, or a framework name:
    ``auto``, ``torch``, ``tensorflow``, a registered one). ``progress(message)`` gets
    ``{"mode", "kind", ...}`` as modes run; ``on_row(row)`` each row as it finishes (rank 0 only
    under a launcher). Ctrl-C returns the rows that finished, ``interrupted`` set."""
    from ..factory import check_findable
    from ..registry import backend_spec, get_backend

    if backend is None or backend in ("auto", "torch", "tensorflow"):  # a registered one may refuse --model first
        check_findable(config.model, "--model")  # a module that cannot be found: one line before torch loads (#49)
    if backend is None or isinstance(backend, str):
        backend = get_backend(backend or "auto")
    if config.strategy and config.strategy not in backend.bench_strategies:  # declared, () by default (.ops)
        raise UsageError(f"--strategy {config.strategy} is tf.distribute's, for --framework tensorflow; "
                         f"--framework {backend.name} runs distributed under its own launcher (torchrun)")
    workload = backend.check_workload(config.workload) if config.workload else None  # before the framework loads
    group = backend.bench_start(config)
    target = group.target if group else backend.target(config.device)
    note = None
    if not config.model and not workload:
        workload = backend.default_workload(target)
        note = f"no --workload given: ran the default for a {target.kind.upper()} device, {workload!r}"
    if config.batch_size == AUTO_BATCH and not target.accelerator and config.memory_budget is None:
        raise UsageError(CPU_AUTO_BATCH)
    cfg = config if workload == config.workload else replace(config, workload=workload)
    threads = resolve_threads(cfg.threads, target.accelerator)  # the doctor's default (ampkit.threads)
    cfg = cfg if threads == cfg.threads else replace(cfg, threads=threads)
    probe = probe_model(backend, cfg, target, fork=group is None)  # a launcher's rank has its group's threads
    with backend.bench_threads(target, threads):  # auto's reason compares the count it was measured at
        auto = apply_auto(cfg.modes, lambda: backend.resolve_auto(target))
        doctor = backend.bench_doctor_verdict(target)  # read once, beside auto: what this run is compared with
        environment = {**backend.environment(target), **probe.environment}
    if threads is not None and "cpu" in environment:  # the count every mode's child timed with
        environment["cpu"] = {**(environment.get("cpu") or {}), "threads": threads}
    spec = backend_spec(backend)

    def run_one(mode: str, cfg: BenchConfig = cfg) -> BenchRow:
        request = MeasureRequest(cfg, mode, target, probe.flops_per_sample, group)
        if group is not None:  # under a launcher: in this process, every rank together
            return measure_mode(backend, request, mode_progress(progress, mode))
        if cfg.batch_size == AUTO_BATCH and not backend.bench_searches_in_child:
            return search_in_children(spec, request, probe.batch_size, progress)
        return run_child(spec, request, progress)

    pairing = SEQUENTIAL if group is not None or cfg.batch_size == AUTO_BATCH or cfg.steps < 2 else INTERLEAVED

    def interleaved(c: BenchConfig):
        """The k-th interleaved run: its part of the plan (a set of fresh processes, .rounds.split_plan);
        only a repeat's first set profiles --explain (its row is the one the repeats fold keeps)."""
        from .interleave import run_interleaved

        parts = split_plan(plan_rounds(c.steps), sets(c))
        cpus = child_cpus(target, c.threads)  # every set and repeat of this bench on the same CPUs

        def one(modes, k: int):
            n, blocks = len(parts), parts[k % len(parts)]
            ck = replace(c, steps=sum(blocks), explain=c.explain and k % n == 0)  # one set: c as it was
            requests = [MeasureRequest(ck, m, target, probe.flops_per_sample) for m in modes]
            return run_interleaved(spec, requests, blocks, progress=progress, on_row=on_row, cpus=cpus,
                                   process_set={"set": k % n + 1, "sets": n} if n > 1 else None, last=k % n == n - 1)
        return one

    def sets(c: BenchConfig) -> int:  # a compiled mode compiles in every process: one set (docs/commands/bench.md)
        return (process_sets(len(plan_rounds(c.steps)), target.accelerator, c.repeats, len(auto.modes))
                if pairing == INTERLEAVED and c.compile != "on" else 1)

    def run_group(c: BenchConfig):  # --compile both: eager, then compiled (.compiled)
        return run_modes(auto.modes, c.repeats, lambda mode: run_one(mode, c), steps=c.steps, progress=progress,
                         on_row=on_row if group is None or group.rank == 0 else None, fresh=group is None,
                         interleaved=interleaved(c) if pairing == INTERLEAVED else None, sets=sets(c))

    rows, interrupted = run_variants(cfg, run_group)
    mark_auto(rows, auto)
    if cfg.explain:
        from .explain import explain_rows

        explain_rows(rows, environment)
    name = probe.name or cfg.workload or cfg.model or "unnamed"
    return BenchReport(workload=name, device=target.label, results=rows, environment=environment,
                       doctor_check=doctor_check(doctor, rows, name, threads, probe.matmuls),
                       world_size=group.world_size if group else 1, flops_per_sample=probe.flops_per_sample,
                       config=document_config(cfg, auto, probe), note=note, interrupted=interrupted,
                       sample_inputs=probe.sample_inputs, replicas=max((r.replicas for r in rows), default=1),
                       pairing=pairing, load_change=_load_change(rows) if pairing == INTERLEAVED else None,
                       input=probe.input)


def _load_change(rows: list[BenchRow]) -> dict | None:
    """The load check (:func:`.rounds.load_change`) over the ok rows' rounds of the first group, within
    each process's rounds (a set or a repeat: between processes a mode's pace differs by itself, which
    is no load); the largest change found, its round numbers counted over the run."""
    seen: dict[str, BenchRow] = {}
    for r in rows:
        if r.status == "ok" and r.round_ms and r.mode not in seen:
            seen[r.mode] = r
    if not seen:
        return None
    spans = next(iter(seen.values())).rounds_per_process or [max(len(r.round_ms) for r in seen.values())]
    found, start = None, 0
    for n in spans:
        got = load_change({m: r.round_ms[start:start + n] for m, r in seen.items()}, first=start + 1)
        if got is not None and (found is None or got["spread"] > found["spread"]):
            found = got
        start += n
    return found


def doctor_check(doctor: dict | None, rows: list[BenchRow], workload: str, threads: int | None,
                 matmuls: list | None = None) -> dict | None:
    """The document's ``doctor_check``: the doctor's cached verdict this run is compared with, the
    workload's matmul size (from the probe's ``matmuls``, or ``--explain``'s profile), and where they
    disagree (:mod:`.doctor_check`); None without a doctor verdict."""
    if not doctor or doctor.get("source") != "doctor":
        return None
    from .doctor_check import bench_rows, disagreements, matmul_size

    table = bench_rows(rows)
    size = matmul_size(table) or matmul_size([{"matmuls": matmuls}])
    return {"recommended": doctor.get("recommended"), "measured_at": doctor.get("measured_at"),
            "threads": doctor.get("threads"), "matmul_size": round(size, 1) if size else None,
            "disagreements": disagreements(doctor, table, workload, threads=threads, matmul_size=size)}


def probe_model(backend, cfg: BenchConfig, target: Target, fork: bool = False) -> ModelProbe:
    """``bench_probe``: here for a built-in workload, in an isolated child for a user's ``--model``
    (:func:`ampkit.isolation.run_isolated`: its crash, ``sys.exit`` or hang is one usage-error line).
    ``fork``: the child may be forked where the backend says it is safe (``bench_probe_fork``)."""
    if not cfg.model:
        return _probe(backend, cfg, target)
    from ..isolation import run_isolated
    from ..registry import backend_spec

    return run_isolated(_probe_isolated, backend_spec(backend), cfg, target, what=f"probing --model {cfg.model}",
                        timeout=cfg.timeout, start="fork" if fork and backend.bench_probe_fork(target) else "spawn")


def _probe_isolated(spec: str, cfg: BenchConfig, target: Target) -> ModelProbe:
    from ..registry import load_backend

    return _probe(load_backend(spec), cfg, target)


def _probe(backend, cfg: BenchConfig, target: Target) -> ModelProbe:
    try:
        return backend.bench_probe(cfg, target)
    except ProbeStepFailed as failed:
        shape = f" with --input-shape {','.join(map(str, cfg.input_shape))}" if cfg.input_shape else ""
        hint = class_count_hint(failed.detail, cfg.num_classes, failed.outputs)
        raise UsageError(f"{cfg.model} failed a training step on a probe batch of 2{shape} and "
                         f"--num-classes {failed.num_classes}: {failed.detail}{hint}") from None


def document_config(cfg: BenchConfig, auto: AutoChoice, probe: ModelProbe) -> dict:
    """The document's ``config``: what was asked (the default workload filled in, auto resolved)
    and where ``--batch-size auto`` started."""
    return {**cfg.to_dict(), "modes": list(auto.modes), "batch_size_hint": probe.batch_size,
            "auto_mode": auto.mode, "auto_reason": auto.reason}

