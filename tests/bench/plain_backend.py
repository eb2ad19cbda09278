"""A bench-only backend in plain Python (``plain_backend:PlainBackend``): the proof that bench's
flow is the driver's, and a framework only answers :class:`ampkit.bench.ops.BenchOps`.

Its "training step" sleeps ``0.001 * batch / 64 / speed`` seconds (bf16 twice as fast as fp32, fp16
unsupported; on ``slowbf16`` bf16 is three times slower),
its peak memory is ``batch * 1000`` bytes (so ``--memory-budget 50000`` fits batch 50
at most), and its loss halves each step. Like TensorFlow it searches ``--batch-size auto`` with a
fresh child per trial."""

from __future__ import annotations

import time

from ampkit.bench.ops import BenchOps, BenchSession, Measured, MeasureRequest, ModelProbe, ProbeStepFailed
from ampkit.errors import ModeUnavailableError, UsageError
from ampkit.target import Target

SPEED = {"fp32": 1.0, "tf32": 1.0, "bf16": 2.0}
#: workload -> per-mode speed where it differs from SPEED ("slowbf16": bf16 at a third of fp32's speed)
SPEEDS = {"slowbf16": {"bf16": 1 / 3}}
WORKLOADS = ("tiny", "small", "slowbf16")
#: the environment a doctor verdict planted for this backend is cached under (ampkit.auto_cache)
FINGERPRINT = ("plain", "1", "cpu")


class PlainBackend(BenchOps):  # derived from the protocol: its optional operations' defaults
    name = "plain"
    bench_searches_in_child = False

    # ---- EnvironmentOps
    def target(self, device: str) -> Target:
        if device not in ("auto", "cpu"):
            raise UsageError(f"--framework plain supports --device auto or cpu; received {device!r}")
        return Target("cpu", False, "plain:0")

    def environment(self, target: Target) -> dict:
        return {"framework": "plain", "device": target.label}

    def mode_support(self, mode: str, target: Target) -> tuple[bool, str]:
        return (mode in SPEED, "plain has no float16" if mode not in SPEED else "")

    def resolve_auto(self, target: Target) -> tuple[str, str]:
        return "bf16", "plain bf16 is twice as fast"

    def default_workload(self, target: Target) -> str:
        return "tiny"

    def check_workload(self, name: str) -> str:
        if name not in WORKLOADS:
            raise UsageError(f"unknown workload {name!r} for --framework plain; built-in: {', '.join(WORKLOADS)}")
        return name

    # ---- BenchOps
    def bench_start(self, config):
        return None

    def bench_doctor_verdict(self, target: Target):
        from ampkit import auto_cache

        return auto_cache.load(auto_cache.fingerprint(*FINGERPRINT))

    def bench_probe(self, config, target: Target) -> ModelProbe:
        if config.model == "broken:model":
            raise ProbeStepFailed("ValueError: shapes (2,5) and (8,4) not aligned", config.num_classes or 10)
        return ModelProbe(config.workload or config.model, 1000.0, [8], 64, environment={"plain_probe": "yes"})

    def bench_open(self, request: MeasureRequest) -> BenchSession:
        ok, why = self.mode_support(request.mode, request.target)
        if not ok:
            raise ModeUnavailableError(why)
        return PlainSession(request)


class PlainSession(BenchSession):
    """Sleeps a step, measures nothing else: the loss halves each step, the peak is the batch's."""

    default_batch = 64

    def __init__(self, request: MeasureRequest):
        mode = request.mode
        self.speed, self.facts, self.loss = SPEEDS.get(request.config.workload, {}).get(mode, SPEED[mode]), {}, 1.0

    def begin(self, batch_size: int) -> None:
        self.batch = batch_size

    def steps(self, n: int, timed: bool, on_step=None) -> list[float]:
        times = []
        for _ in range(n):
            t = time.perf_counter()
            time.sleep(0.001 * self.batch / 64 / self.speed)
            self.loss /= 2
            if timed:
                times.append(time.perf_counter() - t)
            if on_step:
                on_step()
        return times

    def finish(self, profile_steps: int = 0) -> Measured:
        return Measured(self.batch * 1000, "plain", first_loss=1.0, final_loss=self.loss)
