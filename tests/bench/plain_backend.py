"""A bench-only backend in plain Python (``plain_backend:PlainBackend``): the proof that bench's
flow is the driver's, and a framework only answers :class:`ampkit.bench.ops.BenchOps`.

Its "training step" sleeps ``0.001 * batch / 64 / speed`` seconds (bf16 twice as fast as fp32, fp16
unsupported; on ``slowbf16`` bf16 is three times slower),
its peak memory is ``batch * 1000`` bytes (so ``--memory-budget 50000`` fits batch 50
at most), and its loss halves each step. Like TensorFlow it searches ``--batch-size auto`` with a
fresh child per trial."""

from __future__ import annotations

import time

from ampkit.bench.ops import BenchOps, MeasureRequest, ModelProbe, ProbeStepFailed
from ampkit.bench.report import BenchRow
from ampkit.bench.rows import check_final_loss, fill_timing
from ampkit.errors import UsageError
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

    def bench_measure(self, request: MeasureRequest, progress) -> BenchRow:
        cfg, mode = request.config, request.mode
        row = BenchRow(mode, steps=cfg.steps)
        ok, why = self.mode_support(mode, request.target)
        if not ok:
            row.status, row.error = "unsupported", why
            return row
        batch = cfg.batch_size or 64
        times, loss = [], 1.0
        for i in range(cfg.warmup + cfg.steps):
            t = time.perf_counter()
            time.sleep(0.001 * batch / 64 / SPEEDS.get(cfg.workload, {}).get(mode, SPEED[mode]))
            loss /= 2
            if i >= cfg.warmup:
                times.append(time.perf_counter() - t)
            progress("step", i + 1, cfg.warmup + cfg.steps)
        fill_timing(row, batch, times, request.flops_per_sample, False, warmup=cfg.warmup, first_loss=1.0)
        row.peak_memory_bytes = batch * 1000
        check_final_loss(row, loss, cfg)
        return row
