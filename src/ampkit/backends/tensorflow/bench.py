"""``ampkit bench`` for Keras: :class:`ampkit.bench.ops.BenchOps`'s operations, the same rows as PyTorch.

A ``--model`` factory may return a Keras 3 or a Keras 2 (tf_keras) model: each is compiled with its
own Keras's optimizer and LossScaleOptimizer, and the report's environment says which ran (``keras``).
"""

from __future__ import annotations

import time

from ...bench.config import BenchConfig
from ...bench.ops import BenchSession, Measured, MeasureRequest, ModelProbe, ProbeStepFailed, SizeWork
from ...errors import ModeUnavailableError, UsageError
from ...host_memory import HostPeak, rss_bytes
from ...workload_sizes import size_kwargs
from .environment import grow_gpu_memory, import_tensorflow, tf_environment
from .workloads import all_layers, build_workload, count_flops


class _GpuPeak:
    """Peak GPU memory over a region, as TensorFlow's allocator reports it."""

    source = "tf.config.experimental.get_memory_info peak"

    def __init__(self):
        self.peak = 0

    def __enter__(self):
        import_tensorflow().config.experimental.reset_memory_stats("GPU:0")
        return self

    def __exit__(self, *exc):
        self.peak = int(import_tensorflow().config.experimental.get_memory_info("GPU:0")["peak"])
        return False


def _scalar(loss) -> float:
    return float(loss[0] if isinstance(loss, (list, tuple)) else loss)


def _check_policy_reached(model, mp) -> None:
    """A mixed mode whose policy reached no layer would be fp32 under another name: refuse it."""
    want = mp.precision.compute_dtype if mp.precision.autocast else None
    if want and not any(getattr(lay, "compute_dtype", None) == want for lay in all_layers(model)):
        raise RuntimeError(f"no layer of the model computes in {want}: the {mp.policy} policy did not reach it "
                           "(layers given an explicit dtype keep it)")


class KerasSession(BenchSession):
    """One mode's Keras model, compiled with the mode's optimizer (LossScaleOptimizer in fp16) inside
    the mode's scope -- the policy when layers are built, TF32 on or off as the mode says, and under
    ``--strategy`` the strategy's scope -- which stays entered until :meth:`close`; trained on one
    fixed batch with ``train_on_batch`` (a host value: the step is complete when it returns)."""

    def __init__(self, request: MeasureRequest):
        import contextlib

        from .engine.mixed_precision import mode_support

        cfg, mode = request.config, request.mode
        tf = import_tensorflow()
        self.cfg, self.gpu = cfg, bool(tf.config.list_physical_devices("GPU"))
        self.facts = {"device_name": tf_environment()["device_name"], "compiled": cfg.compile == "on"}
        self.mem = None
        if mode == "fp8":  # Keras 3's float8 layers: fp8 hardware, or their emulation
            from .engine.fp8 import fp8_support

            ok, self.facts["emulated"], why = fp8_support()
        else:
            ok, why = mode_support(mode)
        if not ok:
            raise ModeUnavailableError(why)
        self.stack = contextlib.ExitStack()
        try:
            self._build(request)
        except BaseException:
            self.stack.close()
            raise

    def _build(self, request: MeasureRequest) -> None:
        import keras

        from .distributed import strategy_scope
        from .engine.mixed_precision import MixedPrecision
        from .flavor import load_every_keras

        cfg, mode = request.config, request.mode
        distributed, self.facts["replicas"] = strategy_scope(cfg.strategy, cfg.replicas, self.gpu)
        mp = MixedPrecision(mode, keras="keras")
        if cfg.model:
            load_every_keras()  # a factory may build with tf_keras: the scope then sets its policy too
        self.baseline = rss_bytes()
        self.stack.enter_context(mp.scope())
        self.stack.enter_context(distributed)
        keras.utils.set_random_seed(cfg.seed)
        self.workload = w = build_workload(cfg.workload, cfg.model, cfg.input_shape, cfg.num_classes, sizes=_sizes(cfg))
        self.default_batch = w.batch_size
        k = w.flavor.module  # Keras 3, or tf_keras for a Keras 2 model
        w.model = mp.prepare(w.model)  # fp8: Keras float8 layers (before compile)
        if mode == "fp8" and not any(d["converted"] for d in mp.fp8_layers):  # bf16 under fp8's name: refused
            why = "; ".join(f"{d['name']}: {d['reason']}" for d in mp.fp8_layers[:3]) or "it has no Dense/EinsumDense"
            raise RuntimeError(f"no layer of the model became Keras float8 ({why})")
        jit = {"jit_compile": True} if cfg.compile == "on" else {}  # --compile on: XLA (graph_breaks null)
        w.model.compile(optimizer=mp.optimizer(k.optimizers.AdamW(w.lr)), loss=w.keras_loss(), **jit)
        mp.check_model(w.model)
        _check_policy_reached(w.model, mp)
        self.skipped = self.warmup_skipped = 0
        self.loss, self.first = float("nan"), None

    def begin(self, batch_size: int) -> None:
        self.batch_size = batch_size
        self.x, self.y = self.workload.make_batch(batch_size, self.cfg.seed + 1)
        self.mem = (_GpuPeak() if self.gpu else HostPeak(self.baseline)).__enter__()

    def steps(self, n: int, timed: bool, on_step=None) -> list[float]:
        """A step was skipped when the LossScaleOptimizer lowered its scale (it halves on inf/NaN
        gradients and skips the update), or kept it at tf_keras's floor of 1 while its growth counter
        restarted."""
        from .engine.mixed_precision import loss_scale_of
        from .flavor import flavor_of

        model, times = self.workload.model, []
        if timed and not self.gpu:  # the pools the timed steps really ran on (0: TensorFlow's own choice)
            self.facts["threads"] = import_tensorflow().config.threading.get_intra_op_parallelism_threads() or None
        self.facts["clock"] = "wall"  # TensorFlow runs ops on its own pools' threads: this thread's clock would miss them
        for _ in range(n):
            before = loss_scale_of(model.optimizer)
            t = time.perf_counter()
            loss = model.train_on_batch(self.x, self.y)  # returns a host value: the step is complete
            dt = time.perf_counter() - t
            after = loss_scale_of(model.optimizer)
            was_skipped = int(before is not None and flavor_of(model.optimizer).skipped(model.optimizer, before, after))
            self.loss = _scalar(loss)
            if self.first is None:
                self.first = self.loss
            if timed:
                times.append(dt)
                self.skipped += was_skipped
            else:
                self.warmup_skipped += was_skipped
            if on_step is not None:
                on_step()
        return times

    def _end_peak(self) -> None:
        if self.mem is not None:
            self.mem.__exit__(None, None, None)
            self.peak, self.mem = self.mem.peak, None

    def finish(self, profile_steps: int = 0) -> Measured:
        source = (_GpuPeak if self.gpu else HostPeak).source
        self._end_peak()
        m = Measured(self.peak, source, self.skipped, self.warmup_skipped, self.first, self.loss)
        if profile_steps:  # a few more steps under TensorFlow's profiler (imported only here), after the timed ones
            from .profile_breakdown import profile_steps as profile

            m.breakdown = profile(self.workload.model, self.x, self.y, profile_steps, self.batch_size)
        return m

    def close(self) -> None:
        self._end_peak()
        self.stack.close()


_TELLING = ("incompatible", "outside the valid range", "received a label", "expected", "shape", "must")


def telling_line(exc: BaseException) -> str:
    """The line of a TensorFlow/Keras error that says what is wrong: their first line is often
    only "Graph execution error:" or "Exception encountered when calling Sequential.call()"."""
    import re

    plain = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))  # Keras bolds parts of its messages
    lines = [ln.strip() for ln in plain.splitlines() if ln.strip()]
    for word in _TELLING:
        for ln in lines:
            if word in ln.lower():
                return ln[:300]
    return lines[0][:300] if lines else ""


def _sizes(cfg: BenchConfig) -> dict:
    """--seq-len / --image-size as the built-in's keyword ({} when neither was given)."""
    return size_kwargs("tensorflow", cfg.workload, cfg.model, cfg.seq_len, cfg.image_size)


def _shapes(x):
    """Per-sample input shape(s) of a batch (batch dimension dropped)."""
    if isinstance(x, dict):
        return {k: list(v.shape[1:]) for k, v in x.items() if hasattr(v, "shape")}
    if isinstance(x, (list, tuple)):
        return [list(v.shape[1:]) for v in x if hasattr(v, "shape")]
    return list(x.shape[1:]) if hasattr(x, "shape") else None


def probe(cfg: BenchConfig | dict) -> ModelProbe:
    """Build the workload and, for a user's model, train one step on a batch of 2: a wrong
    --input-shape or --num-classes is reported now, in one line, not as an error row per mode.
    The Keras it was built with goes into the probe's environment (``keras``)."""
    import keras

    cfg = cfg if isinstance(cfg, BenchConfig) else BenchConfig.from_dict(cfg)
    if cfg.data:
        raise UsageError(f"--data {cfg.data}: timing your own data is PyTorch-only for now; with --framework tensorflow "
                         "give --input-shape (the model's inputs are then random)")
    keras.utils.set_random_seed(cfg.seed)
    workload = build_workload(cfg.workload, cfg.model, cfg.input_shape, cfg.num_classes, sizes=_sizes(cfg))
    flops = count_flops(workload.model)
    x, y = workload.make_batch(2, cfg.seed)
    try:
        shapes = _shapes(x)
    except Exception:  # information only
        shapes = None
    if cfg.model:
        try:
            k = workload.flavor.module  # the model's own Keras: Keras 3, or tf_keras for a Keras 2 model
            workload.model.compile(optimizer=k.optimizers.SGD(0.0), loss=workload.keras_loss())
            workload.model.train_on_batch(x, y)
        except Exception as exc:
            raise ProbeStepFailed(f"{type(exc).__name__}: {telling_line(exc)}",
                                  cfg.num_classes or workload.num_classes) from None
    return ModelProbe(workload.name, flops, shapes, workload.batch_size,
                      environment={"keras": workload.flavor.label})


def _use_device(target) -> None:
    """A CPU target hides the GPUs from this process (a child starts seeing them all)."""
    tf = import_tensorflow()
    if not target.accelerator and tf.config.get_visible_devices("GPU"):
        tf.config.set_visible_devices([], "GPU")


class TensorFlowBench:
    """:class:`ampkit.bench.ops.BenchOps` for Keras: each mode in the driver's fresh child, and for
    ``--batch-size auto`` each trial too (``bench_searches_in_child`` False): TensorFlow keeps a
    finished trial's memory (clear_session does not return it on a CPU), so trials in one process
    would inflate each other's peaks."""

    bench_searches_in_child = False
    bench_strategies = ("mirrored",)  # --strategy: tf.distribute (.distributed)

    def bench_start(self, config: BenchConfig) -> None:
        grow_gpu_memory()  # this parent only probes: leave the GPU's memory to each mode's child
        return None

    def bench_probe(self, config: BenchConfig, target) -> ModelProbe:
        _use_device(target)
        return probe(config)

    def bench_open(self, request: MeasureRequest) -> KerasSession:
        grow_gpu_memory()  # the modes' children live side by side (interleaved rounds): none takes the whole GPU
        _use_device(request.target)
        return KerasSession(request)

    def bench_doctor_verdict(self, target):
        from ...auto_cache import load

        return load(self.auto_fingerprint(target))  # the Backend's DoctorOps: the key the doctor cached under

    def bench_threads(self, target, threads):
        """TensorFlow's intra- and inter-op pools at ``threads`` (:mod:`ampkit.threads`), set before
        its first op in the mode's fresh child (they cannot be changed back: nothing to restore)."""
        import contextlib
        import multiprocessing

        from ...outputs import owns_process

        if threads is not None and (owns_process() or multiprocessing.parent_process() is not None):
            from .doctor import set_threads

            set_threads(threads)  # a library caller's own process keeps its pools (they cannot be reset)
        return contextlib.nullcontext()

    def bench_size_work(self, target) -> SizeWork:
        """The doctor's matmul (:func:`.doctor_ops.size_work`, ``tf.linalg.matmul``)."""
        from .doctor_ops import size_work

        return SizeWork(size_work, "the doctor's matmul (tf.linalg.matmul) vs fp32, measured in this run")
