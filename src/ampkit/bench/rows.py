"""A measured bench row's figures, the same for every framework: what a backend's session measured
(:class:`~ampkit.bench.ops.Measured` and the step times) becomes the row here -- timing, FLOPs,
the final loss, the breakdown, a failure in one line -- and ``--batch-size auto``'s search runs
around a backend's trial. Neutral: it imports no flow (the driver and :mod:`.runner` import it)."""

from __future__ import annotations

import math
from collections.abc import Callable

from ..errors import AutocastDisabledError, ModeUnavailableError, UsageError, one_line
from ..host_memory import is_oom
from ..timing import step_ms_summary
from .batch_search import largest_fitting
from .config import BenchConfig
from .judge import NONFINITE_LOSS
from .ops import Measured, MeasureRequest
from .peaks import peak_tflops
from .report import BenchRow

__all__ = ["add_size_table", "check_final_loss", "describe_failure", "fault", "fill_flops", "fill_measured",
           "fill_row", "fill_timing", "new_row", "search_batch"]


def new_row(request: MeasureRequest) -> BenchRow:
    """The row of ``request``'s mode before anything runs (a plan mode carries its plan)."""
    cfg = request.config
    row = BenchRow(request.mode, steps=cfg.steps)
    if request.mode.startswith("plan:") and cfg.plan:
        row.plan = cfg.plan
    return row


def fill_measured(row: BenchRow, request: MeasureRequest, batch_size: int, step_s: list[float], warmup: int,
                  m: Measured, facts: dict, *, compile_s: float | None = None) -> None:
    """The row of a finished run: the session's facts, the timing of ``step_s``, the peak, the
    losses (a non-finite one makes it an error), the compile counters, the breakdown."""
    for key in ("device_name", "emulated", "replicas", "compiled", "threads", "clock"):
        if key in facts:
            setattr(row, key, facts[key])
    gpu = request.target.accelerator
    fill_timing(row, batch_size, step_s, request.flops_per_sample, gpu, warmup=warmup, skipped=m.skipped_steps,
                warmup_skipped=m.warmup_skipped_steps, first_loss=m.first_loss)
    row.peak_memory_bytes, row.memory_source = m.peak_memory_bytes, m.memory_source
    if row.compiled:
        row.compile_s = compile_s
        row.graph_breaks, row.recompiles, row.graph_break_reasons = m.graph_breaks, m.recompiles, list(m.graph_break_reasons)
    check_final_loss(row, m.final_loss, request.config)
    if m.breakdown is not None:  # the size table it cites is measured after (runner.measure_sizes)
        fill_row(row, m.breakdown)


def fault(row: BenchRow, exc: BaseException) -> BenchRow:
    """A mode's own failure as its row's status: unsupported (the mode cannot run here), oom, or
    error; a usage error is the run's, not the mode's, and is raised again."""
    if isinstance(exc, UsageError):
        raise exc
    if isinstance(exc, (ModeUnavailableError, AutocastDisabledError)):
        row.status, row.error = "unsupported", str(exc)
    else:
        row.status, row.error = ("oom" if is_oom(exc) else "error"), describe_failure(exc)
    return row


def fill_timing(row: BenchRow, batch_size: int, step_s: list[float], flops: float | None, gpu: bool,
                world_size: int = 1, *, warmup: int | None = None, skipped: int = 0, warmup_skipped: int = 0,
                first_loss: float | None = None) -> None:
    """samples/s, the step-time summary, TFLOP/s and (on a known GPU) MFU of one measured run.

    samples/s is the batch over the MEDIAN step time (``step_ms.p50``): the one definition every
    speedup uses (:mod:`ampkit.bench.judge`). ``world_size`` processes each ran ``batch_size``
    samples per step (global throughput). ``skipped``/``warmup_skipped``: steps the loss scaler
    skipped in the timed window and in the warm-up.
    """
    row.batch_size = batch_size
    row.step_ms = step_ms_summary(step_s)
    row.step_times_ms = [round(s * 1e3, 6) for s in step_s]
    row.samples_per_s = batch_size * world_size / (row.step_ms["p50"] / 1e3)
    row.skipped_steps, row.warmup_skipped_steps = int(skipped), int(warmup_skipped)
    if warmup is not None:
        row.warmup = warmup
    row.first_loss = first_loss if first_loss is None or math.isfinite(first_loss) else None
    fill_flops(row, flops, gpu, world_size)


def fill_flops(row: BenchRow, flops: float | None, gpu: bool, world_size: int = 1) -> None:
    if not flops or not row.samples_per_s:
        return
    row.tflops = flops * row.samples_per_s / 1e12
    peak = peak_tflops(row.device_name, row.mode) if gpu else None
    row.mfu = row.tflops / (peak * world_size) if peak else None


def check_final_loss(row: BenchRow, loss: float, cfg: BenchConfig) -> None:
    """A run whose loss is inf/NaN did not train: the row is an error, saying how far it got."""
    row.final_loss = loss
    if not math.isfinite(loss):
        row.status = "error"
        skipped = [f"{row.skipped_steps} of {cfg.steps} timed"] if row.skipped_steps else []
        skipped += [f"{row.warmup_skipped_steps} of {cfg.warmup} warm-up"] if row.warmup_skipped_steps else []
        row.error = (f"{NONFINITE_LOSS}{loss} after {cfg.warmup + cfg.steps} steps"
                     + (f" ({' and '.join(skipped)} steps skipped by the loss scaler)" if skipped else ""))


def describe_failure(exc: BaseException) -> str:
    return one_line(exc, 500)


def search_batch(row: BenchRow, trial: Callable[[int], tuple[bool, int | None]], start: int, cap: int,
                 budget: int | None, say=None) -> int | None:
    """``--batch-size auto`` around a backend's ``trial(b) -> (ran without OOM, peak bytes)``.

    A batch fits when it ran and, with a ``budget``, its measured peak stays within it. Records
    every trial in ``row.search``; sets ``max_batch_size``, or the oom status when nothing fits.
    """
    def fits(b: int) -> bool:
        ran, peak = trial(b)
        ok = ran and (budget is None or (peak or 0) <= budget)
        row.search.append([b, ok, peak])
        if say:
            say("search", b, None)
        return ok

    best = largest_fitting(fits, start, cap)
    if best is None:
        row.status = "oom"
        row.error = ("even batch size 1 does not fit" +
                     (f" in the memory budget of {budget} bytes" if budget else " in device memory"))
        return None
    row.max_batch_size = best
    return best


def fill_row(row, breakdown, size_table: dict | None = None, size_source: str | None = None) -> None:
    """A measured row gains ``breakdown`` (shares), ``breakdown_ms`` (the shares of its timed median
    step, so that the milliseconds add up to ``step_ms.p50``) and ``explain_detail``."""
    row.breakdown = dict(breakdown.shares)
    p50 = (row.step_ms or {}).get("p50") or breakdown.step_ms
    row.breakdown_ms = {c: round(v * p50, 4) for c, v in breakdown.shares.items()}
    row.explain_detail = breakdown.to_detail()
    if size_table is not None:
        add_size_table(row, size_table, size_source)


def add_size_table(row, size_table: dict, size_source: str | None) -> None:
    """The size table (:mod:`ampkit.doctor.sizes`) the explanation of a row with a breakdown cites."""
    row.explain_detail["size_table"] = size_table
    row.explain_detail["size_table_source"] = size_source
