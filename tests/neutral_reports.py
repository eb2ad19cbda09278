"""Reports as each framework shapes them, built by hand (no framework imported): the neutral layer
— verdicts, findings, relative figures, rendering, JSON — must treat both the same and say which ran."""

from __future__ import annotations

from ampkit.audit.report import AuditReport, LayerStats
from ampkit.bench.report import BenchReport, BenchRow
from ampkit.doctor.report import DoctorReport, ModeReport
from ampkit.parity.report import ParityReport, ParityResult

CPU = {"model": "Test CPU", "machine": "x86_64", "logical_cpus": 2, "avx2": True, "avx512f": True,
       "avx512_bf16": True, "avx512_fp16": False, "amx_bf16": False, "amx_fp16": False, "amx_tile": False}

ENVIRONMENTS = {
    "torch": {"ampkit": "0.test", "framework": "torch", "framework_version": "2.99.0", "torch_build": "cuda",
              "python": "3.11.7", "platform": "Linux", "cuda_runtime": "12.8", "cudnn": 90100,
              "device": "cuda:0", "device_name": "NVIDIA H200", "compute_capability": "9.0",
              "gpus": [{"index": 0, "name": "NVIDIA H200", "compute_capability": "9.0",
                        "memory_total_bytes": 141 * 2**30}],
              "cpu": {**CPU, "threads": 2, "torch_cpu_capability": "AVX512"}},
    "tensorflow": {"ampkit": "0.test", "framework": "tensorflow", "framework_version": "2.77.0",
                   "keras_version": "3.99.0", "keras_backend": "tensorflow", "python": "3.11.7", "platform": "Linux",
                   "cuda_runtime": None, "cudnn": None, "device": "CPU:0", "device_name": "Test CPU",
                   "compute_capability": None, "gpus": [], "cpu": CPU},
}
DEVICES = {"torch": "cuda:0", "tensorflow": "CPU:0"}


def doctor(framework: str) -> DoctorReport:
    def mode(supported, accelerated, speedup, selftest, verdict, reason, ci=None):
        return ModeReport(supported=supported, accelerated=accelerated, speedup=speedup, speedup_ci=ci,
                          rounds=7 if ci else None, selftest=selftest, verdict=verdict, reason=reason,
                          training_speedup=speedup, training_speedup_ci=ci)

    modes = {
        "fp32": mode(True, False, 1.0, "pass", "usable", "baseline", [1.0, 1.0]),
        "tf32": mode(False, None, None, "skip", "unsupported", "no TF32 here"),
        "fp16": mode(True, False, 0.5, "pass", "slower", "fp16 runs 2.0x slower than fp32 here", [0.4, 0.6]),
        "bf16": mode(True, True, 3.0, "pass", "recommended", "measured 3.00x", [2.5, 3.5]),
        "fp8": mode(False, None, None, "skip", "unsupported", "no fp8 here"),
    }
    return DoctorReport(framework, DEVICES[framework], modes, "bf16", "bf16 measured 3.00x",
                        ENVIRONMENTS[framework], quick=False, elapsed_s=1.5)


def bench(framework: str) -> BenchReport:
    rows = [BenchRow("fp32", batch_size=64, samples_per_s=1000.0, step_ms={"p50": 64.0, "p90": 70.0},
                     peak_memory_bytes=400 * 2**20, final_loss=2.3, steps=5),
            BenchRow("bf16", batch_size=64, samples_per_s=2500.0, step_ms={"p50": 25.6, "p90": 30.0},
                     peak_memory_bytes=250 * 2**20, final_loss=2.31, steps=5),
            BenchRow("fp16", status="error", error="RuntimeError: planted", steps=5)]
    return BenchReport("mlp", DEVICES[framework], rows, ENVIRONMENTS[framework], flops_per_sample=1e9,
                       config={"steps": 5, "warmup": 1})


def parity(framework: str) -> ParityReport:
    results = [ParityResult("fp32", [0, 1, 2], {"mean": 0.2, "std": 0.01}, {"name": "accuracy", "mean": 0.95, "std": 0.01},
                            None, None, "baseline", "the reference"),
               ParityResult("bf16", [0, 1, 2], {"mean": 0.21, "std": 0.01}, {"name": "accuracy", "mean": 0.949, "std": 0.01},
                            -0.001, 0.01, "pass", "not worse")]
    return ParityReport("digits", DEVICES[framework], results, ENVIRONMENTS[framework], 0.01, 3)


def audit(framework: str) -> AuditReport:
    layers = [LayerStats("encoder.0", "Linear", fwd_amax=3.0, fwd_headroom_log2=14.4),
              LayerStats("boom", "Rescaling", fwd_amax=1e6, fwd_headroom_log2=-3.9, fwd_nonfinite=12),
              LayerStats("head", "Linear", fwd_amax=2.0, fwd_headroom_log2=15.0, grad_amax=10.0,
                         grad_nonfinite=4)]  # 10 x 2**16 > 65504, and the fp16 pass saw it
    return AuditReport("fp16", 65536.0, layers, {"name": "boom", "phase": "forward", "step": 0}, [], DEVICES[framework],
                       1, ENVIRONMENTS[framework], "mlp")
