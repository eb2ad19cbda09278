"""ampkit bench for Keras: the same rows as PyTorch, each mode in a fresh child process."""

from __future__ import annotations

import math
import time

from ..bench.config import BenchConfig
from ..bench.measure import PeakMemory, is_oom, rss_bytes
from ..bench.report import BenchReport, BenchRow
from ..bench.runner import run_child, run_modes
from ..bench.worker import serve_row
from ..errors import UsageError
from ..timing import HOST, percentile
from .common import import_tf, tf_device_name, tf_environment
from .workloads import build_tf_workload, check_tf_workload, count_flops


def _peak_context(gpu: bool, baseline: int):
    if not gpu:
        return PeakMemory(HOST, baseline=baseline)
    tf = import_tf()

    class _GpuPeak:
        source = "tf.config.experimental.get_memory_info peak"
        peak = 0

        def __enter__(self):
            tf.config.experimental.reset_memory_stats("GPU:0")
            return self

        def __exit__(self, *exc):
            self.peak = int(tf.config.experimental.get_memory_info("GPU:0")["peak"])
            return False

    return _GpuPeak()


def _train(workload, batch_size: int, steps: int, warmup: int, seed: int, gpu: bool, baseline: int, say):
    from ..keras.engine import loss_scale_of

    x, y = workload.make_batch(batch_size, seed + 1)
    model = workload.model
    times, skipped, loss = [], 0, float("nan")
    with _peak_context(gpu, baseline) as mem:
        for i in range(warmup + steps):
            before = loss_scale_of(model.optimizer)
            t = time.perf_counter()
            loss = model.train_on_batch(x, y)  # returns a host value: the step is complete
            dt = time.perf_counter() - t
            after = loss_scale_of(model.optimizer)
            if i >= warmup:
                times.append(dt)
                skipped += int(before is not None and after < before)
            say("step", i + 1, warmup + steps)
    loss = float(loss[0] if isinstance(loss, (list, tuple)) else loss)
    return times, skipped, loss, mem.peak, mem.source


def run_mode_tf(cfg: BenchConfig, mode: str, flops: float | None, say) -> BenchRow:
    import keras

    from ..keras.engine import MixedPrecision, mode_support_tf

    tf = import_tf()
    row = BenchRow(mode, steps=cfg.steps)
    gpu = bool(tf.config.list_physical_devices("GPU"))
    row.device_name = tf_environment()["device_name"]
    ok, why = mode_support_tf(mode)
    if not ok:
        row.status, row.error = "unsupported", why
        return row
    try:
        mp = MixedPrecision(mode)
        baseline = rss_bytes()

        def build():
            keras.utils.set_random_seed(cfg.seed)
            with mp.scope():
                wl = build_tf_workload(cfg.workload, cfg.model, cfg.input_shape, cfg.num_classes)
                wl.model.compile(optimizer=mp.optimizer(keras.optimizers.AdamW(wl.lr)), loss=wl.keras_loss())
            mp.check_model(wl.model)
            return wl

        workload = build()
        batch_size = cfg.batch_size or workload.batch_size  # "auto" is searched by the parent
        times, skipped, loss, peak, source = _train(workload, batch_size, cfg.steps, cfg.warmup, cfg.seed, gpu,
                                                    baseline, say)
        ms = [t * 1e3 for t in times]
        row.batch_size = batch_size
        row.samples_per_s = batch_size * len(times) / sum(times)
        row.step_ms = {"p50": percentile(ms, 50), "p90": percentile(ms, 90), "mean": sum(ms) / len(ms),
                       "min": min(ms), "max": max(ms)}
        row.peak_memory_bytes, row.memory_source = peak, source
        row.skipped_steps, row.final_loss = skipped, loss
        if flops:
            from ..bench.peaks import peak_tflops

            row.tflops = flops * row.samples_per_s / 1e12
            peak_t = peak_tflops(row.device_name, mode) if gpu else None
            row.mfu = row.tflops / peak_t if peak_t else None
        if not math.isfinite(loss):
            row.status, row.error = "error", f"loss is {loss} after {cfg.warmup + cfg.steps} steps"
    except UsageError:
        raise
    except Exception as exc:
        oom = is_oom(exc) or type(exc).__name__ == "ResourceExhaustedError"
        row.status = "oom" if oom else "error"
        row.error = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:500]
    return row


def tf_child_entry(conn, cfg_dict: dict, mode: str, device_str: str, flops: float | None) -> None:
    def make(progress):
        if device_str == "cpu":
            import_tf().config.set_visible_devices([], "GPU")
        return run_mode_tf(BenchConfig.from_dict(cfg_dict), mode, flops, progress)

    serve_row(conn, mode, make)


def _search_mode(cfg: BenchConfig, mode: str, device: str, flops, progress) -> BenchRow:
    """--batch-size auto for Keras: every trial in a fresh child process.

    TensorFlow keeps the memory of a finished trial (clear_session does not return it on a CPU),
    so trials in one process would inflate each other's peaks; a fresh process per trial cannot.
    """
    from ..bench.batch_search import largest_fitting

    trials: list = []
    failed: list[BenchRow] = []

    def fits(b: int) -> bool:
        trial = BenchConfig.from_dict({**cfg.to_dict(), "batch_size": b, "memory_budget": None,
                                       "steps": 2, "warmup": 1})
        row = run_child(trial, mode, device, flops, None, target=tf_child_entry)
        if row.status not in ("ok", "oom"):
            failed.append(row)
            raise _TrialFailed
        ok = row.status == "ok" and (cfg.memory_budget is None or (row.peak_memory_bytes or 0) <= cfg.memory_budget)
        trials.append([b, ok, row.peak_memory_bytes])
        if progress:
            progress({"mode": mode, "kind": "search", "done": b, "total": None})
        return ok

    try:
        best = largest_fitting(fits, cfg.batch_size_hint or 32, cfg.search_cap)
    except _TrialFailed:
        return failed[0]  # unsupported or error: the trial's own row says why
    if best is None:
        return BenchRow(mode, status="oom", error="even batch size 1 does not fit" +
                        (f" in the memory budget of {cfg.memory_budget} bytes" if cfg.memory_budget else ""),
                        search=trials, steps=cfg.steps)
    final = BenchConfig.from_dict({**cfg.to_dict(), "batch_size": best, "memory_budget": None})
    row = run_child(final, mode, device, flops, progress, target=tf_child_entry)
    row.max_batch_size, row.search = best, trials
    return row


class _TrialFailed(Exception):
    pass


def run_bench_tf(cfg: BenchConfig, progress=None, on_row=None) -> BenchReport:
    import keras

    cfg.validate()
    tf = import_tf()
    gpu = bool(tf.config.list_physical_devices("GPU")) and cfg.device != "cpu"
    note = None
    if not cfg.model and not cfg.workload:
        cfg.workload = "resnet50" if gpu else "mlp"
        note = f"no --workload given: ran the default for a {'GPU' if gpu else 'CPU'} device, {cfg.workload!r}"
    if cfg.workload:
        cfg.workload = check_tf_workload(cfg.workload)
    if cfg.batch_size == "auto" and not gpu and cfg.memory_budget is None:
        raise UsageError("on a CPU, --batch-size auto needs --memory-budget SIZE; e.g. --memory-budget 2GiB")
    keras.utils.set_random_seed(cfg.seed)
    workload = build_tf_workload(cfg.workload, cfg.model, cfg.input_shape, cfg.num_classes)  # validate in the parent
    flops = count_flops(workload.model)
    name = workload.name
    cfg.batch_size_hint = workload.batch_size  # where --batch-size auto starts
    del workload
    device = "cuda" if gpu else "cpu"
    run_one = (lambda mode: _search_mode(cfg, mode, device, flops, progress)) if cfg.batch_size == "auto" else None
    rows, interrupted = run_modes(cfg, device, flops, progress, on_row, target=tf_child_entry, run_one=run_one)
    return BenchReport(workload=name, device=tf_device_name() if gpu else "CPU:0", results=rows,
                       environment=tf_environment(), framework="tensorflow", flops_per_sample=flops,
                       config=cfg.to_dict(), note=note, interrupted=interrupted)
