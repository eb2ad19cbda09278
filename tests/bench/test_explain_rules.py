"""Issue 23: bench --explain's framework-neutral parts on synthetic event lists -- the categories of
torch.profiler ops (CPU and a CUDA profile's kernel times), the shares and host_idle, and every
explanation rule (the category that grew most, the size table, the CPU's ISA, the GPU rules)."""

from __future__ import annotations

import math

import pytest

from ampkit.backends.torch.profile_breakdown import OpTime, category, matmul_dims, summarize
from ampkit.bench.breakdown import CATEGORIES, from_op_times
from ampkit.bench.explain import explain_rows, size_rule
from ampkit.bench.report import BenchRow, derive_relative

OPT = ("Optimizer.step#AdamW.step",)


@pytest.mark.parametrize("op, want", [
    (OpTime("aten::addmm", 1.0, ("aten::linear",), ([1024], [64, 784], [784, 1024])), "matmul_conv"),
    # addmm writes its bias into the output with a copy_: the matmul's work, not a cast
    (OpTime("aten::copy_", 1.0, ("aten::linear", "aten::addmm")), "matmul_conv"),
    # autocast's cast of a Linear's input (inside aten::linear, a wrapper): a cast
    (OpTime("aten::copy_", 1.0, ("aten::linear", "aten::to", "aten::_to_copy")), "casts"),
    (OpTime("aten::_to_copy", 1.0, ("aten::linear", "aten::to")), "casts"),
    (OpTime("aten::mkldnn_convolution", 1.0, ("aten::conv2d", "aten::convolution", "aten::_convolution")),
     "matmul_conv"),
    (OpTime("aten::convolution_backward", 1.0, ("autograd::engine::evaluate_function: ConvolutionBackward0",)),
     "matmul_conv"),
    (OpTime("aten::sqrt", 1.0, OPT + ("aten::_foreach_sqrt",)), "optimizer"),
    (OpTime("aten::copy_", 1.0, OPT), "optimizer"),
    (OpTime("aten::_foreach_mul_", 1.0), "optimizer"),
    (OpTime("aten::_amp_foreach_non_finite_check_and_unscale_", 1.0), "loss_scaling"),
    (OpTime("aten::_amp_update_scale_", 1.0), "loss_scaling"),
    (OpTime("aten::mul", 1.0, ("aten::_amp_foreach_non_finite_check_and_unscale_",)), "loss_scaling"),
    (OpTime("aten::gelu", 1.0), "elementwise_norm"),
    (OpTime("aten::native_layer_norm", 1.0, ("aten::layer_norm",)), "elementwise_norm"),
    (OpTime("aten::empty_strided", 1.0), "other"),
    (OpTime("autograd::engine::evaluate_function: AddmmBackward0", 1.0), "other"),
])
def test_torch_ops_fall_into_their_category(op, want):
    assert category(op) == want


def test_matmul_dims_from_recorded_shapes():
    assert matmul_dims(OpTime("aten::addmm", 1, (), ([1024], [64, 784], [784, 1024], [], []))) == (64, 1024, 784)
    assert matmul_dims(OpTime("aten::mm", 1, (), ([1024, 64], [64, 784]))) == (1024, 784, 64)
    assert matmul_dims(OpTime("aten::bmm", 1, (), ([8, 128, 64], [8, 64, 128]))) == (1024, 128, 64)
    # a 3x3 convolution of 16 -> 32 channels on 8 images of 32x32: m = 8*32*32, n = 32, k = 16*9
    assert matmul_dims(OpTime("aten::mkldnn_convolution", 1, (), ([8, 16, 32, 32], [32, 16, 3, 3], [32]))) \
        == (8192, 32, 144)
    assert matmul_dims(OpTime("aten::addmm", 1, (), ())) is None


def test_cpu_shares_sum_to_one_and_uncovered_time_is_other():
    b = from_op_times({"matmul_conv": 6.0, "casts": 1.0, "optimizer": 1.0}, step_ms=10.0, steps=2, source="t")
    assert set(b.shares) == set(CATEGORIES)
    assert math.isclose(sum(b.shares.values()), 1.0, abs_tol=1e-3)
    assert b.shares["matmul_conv"] == 0.6 and b.shares["other"] == 0.2 and b.ms["other"] == 2.0


def test_a_recorded_cuda_profile_gives_kernel_time_and_host_idle():
    """A CUDA step as torch.profiler records it (host self time small, device time per op's kernels):
    the categories are device time, and the 10 ms the GPU had nothing to run is host_idle."""
    ops = [OpTime("aten::mm", 0.05, (), ([256, 1000], [1000, 1000]), device_ms=4.0),
           OpTime("aten::copy_", 0.02, ("aten::linear", "aten::to", "aten::_to_copy"), device_ms=1.0),
           OpTime("aten::gelu", 0.02, (), device_ms=1.0),
           OpTime("aten::_amp_update_scale_", 0.01, (), device_ms=0.5),
           OpTime("aten::_foreach_add_", 0.3, OPT, device_ms=3.5)]
    b = summarize(ops, step_ms=20.0, steps=1, gpu=True, source="cuda")
    assert b.ms["matmul_conv"] == 4.0 and b.ms["casts"] == 1.0 and b.ms["loss_scaling"] == 0.5
    assert b.ms["host_idle"] == 10.0 and b.shares["host_idle"] == 0.5
    assert math.isclose(sum(b.shares.values()), 1.0, abs_tol=1e-3)
    assert b.matmuls == [{"m": 256, "n": 1000, "k": 1000, "ms": 4.0, "calls": 1.0}]


def _row(mode, p50, ms: dict, *, matmuls=None, table=None, bs=64):
    total = sum(ms.values())
    row = BenchRow(mode, batch_size=bs, samples_per_s=bs / (p50 / 1e3), step_ms={"p50": p50, "p90": p50},
                   final_loss=1.0, first_loss=2.0, steps=5)
    row.breakdown = {c: v / total for c, v in ms.items()}
    row.breakdown_ms = dict(ms)
    row.explain_detail = {"matmuls": matmuls or [], "size_table": table, "size_table_source": "test"}
    return row


CPU_NO_FP16 = {"cpu": {"avx512_bf16": True, "avx512_fp16": False, "amx_fp16": False}, "device": "cpu"}


def test_a_slower_mode_names_the_category_that_grew_most_with_its_number():
    base = _row("fp32", 10.0, {"matmul_conv": 2.0, "elementwise_norm": 3.0, "optimizer": 5.0, "casts": 0.0})
    bf16 = _row("bf16", 20.0, {"matmul_conv": 1.0, "elementwise_norm": 4.0, "optimizer": 5.0, "casts": 10.0})
    rows = [base, bf16]
    derive_relative(rows)
    explain_rows(rows, CPU_NO_FP16)
    text = bf16.explanation
    assert text[0].startswith("bf16 is 0.50x fp32 here")
    assert text[1].startswith("casts grew most: 0.00 -> 10.00 ms per step (+10.00 ms; 50% of the bf16 step")
    assert any(s.startswith("matmul_conv: matmuls/convolutions run 2.00x faster (2.00 -> 1.00 ms) and were 20%")
               for s in text)
    assert base.explanation[0].startswith("fp32 is the baseline: optimizer 50%")


def test_fp16_on_a_cpu_without_fp16_instructions_and_its_loss_scaling():
    base = _row("fp32", 10.0, {"matmul_conv": 5.0, "optimizer": 5.0})
    fp16 = _row("fp16", 50.0, {"matmul_conv": 40.0, "optimizer": 5.0, "loss_scaling": 5.0})
    rows = [base, fp16]
    derive_relative(rows)
    explain_rows(rows, CPU_NO_FP16)
    assert fp16.explanation[1].startswith("matmul_conv grew most: 5.00 -> 40.00 ms")
    assert any(s.startswith("loss_scaling: unscaling, inf checks and the scale update cost 5.00 ms (10%")
               for s in fp16.explanation)
    assert fp16.explanation[-1] == "this CPU has no AVX512-FP16 or AMX-FP16 instructions: fp16 matmuls are emulated"


TABLE = {"64": {"speedup": 0.8, "ci": [0.7, 0.9]}, "256": {"speedup": 1.6, "ci": [1.5, 1.7]},
         "1024": {"speedup": 4.0, "ci": [3.5, 4.5]}}


def test_the_size_rule_says_small_matmuls_cannot_gain_and_large_ones_can():
    small = size_rule("bf16", [{"m": 32, "n": 64, "k": 64, "ms": 1.0}], TABLE, "doctor", 0.5)
    large = size_rule("bf16", [{"m": 256, "n": 1000, "k": 1000, "ms": 1.0}], TABLE, "doctor", 0.7)
    assert "32x64 @ 64x64" in small and "the size table predicts slower matmuls at this size in bf16 (0.80x [0.70, " \
                                        "0.90] at 64²)" in small
    assert "large enough to gain (the size table: 4.00x [3.50, 4.50] at 1024²; with matmuls 70% of fp32's step, " \
           "up to 2.11x" in large
    assert small.endswith("size table (doctor): bf16 0.80x at 64², 1.60x at 256², 4.00x at 1024² vs fp32")
    assert size_rule("bf16", [], TABLE, "doctor", 0.5) is None


def test_the_size_rule_predicts_from_the_table_and_the_time_per_call():
    """On a CPU where even a 64² bf16 matmul gains in isolation: a 64x64 model's matmuls take a few
    µs a call in fp32 -- too small whatever the kernel gains; a 1000x1000 model's take a millisecond --
    large enough, and when they ran slower than the table predicts, the explanation says so."""
    gains = {"64": {"speedup": 1.6, "ci": [1.5, 1.7]}, "256": {"speedup": 2.1, "ci": [2.0, 2.2]},
             "1024": {"speedup": 2.4, "ci": [2.3, 2.5]}}
    small_calls = [{"m": 32, "n": 64, "k": 64, "ms": 0.03, "calls": 6}]  # 5 µs a call
    large_calls = [{"m": 32, "n": 1000, "k": 1000, "ms": 7.2, "calls": 6}]  # 1.2 ms a call
    small = size_rule("bf16", small_calls, gains, "doctor", 0.4, measured=1.05, base_matmuls=small_calls)
    large = size_rule("bf16", large_calls, gains, "doctor", 0.6, measured=1.9, base_matmuls=large_calls)
    assert "too small to gain: each of its matmuls takes about 5 µs in fp32, the size of the per-op work around it " \
           "(dispatch, autocast's casts), so a faster kernel (bf16 1.60x [1.50, 1.70] at 64² in the size table) " \
           "saves little; in this step its matmuls ran 1.05x;" in small
    assert "large enough to gain (the size table: 2.10x [2.00, 2.20] at 256²; each call about 1200 µs in fp32; " \
           "with matmuls 60% of fp32's step, up to 1.46x for the whole step); in this step its matmuls ran 1.90x;" \
           in large
    slowed = size_rule("bf16", large_calls, gains, "doctor", 0.6, measured=1.02, base_matmuls=large_calls)
    assert "in this step its matmuls ran 1.02x — less than the table predicts" in slowed
    # faster matmuls that are too small a share of the step to matter (Amdahl)
    capped = size_rule("bf16", large_calls, gains, "doctor", 0.05, base_matmuls=large_calls)
    assert "but with matmuls 5% of fp32's step the whole step can gain at most 1.03x" in capped


def test_gpu_rules_dims_launch_bound_and_a_tf32_baseline():
    env = {"compute_capability": "9.0", "device": "cuda:0"}
    mm = [{"m": 32, "n": 1000, "k": 1001, "ms": 1.0}]
    base = _row("fp32", 10.0, {"matmul_conv": 4.0, "elementwise_norm": 1.0, "host_idle": 5.0}, matmuls=mm)
    tf32 = _row("tf32", 8.0, {"matmul_conv": 2.0, "elementwise_norm": 1.0, "host_idle": 5.0}, matmuls=mm)
    bf16 = _row("bf16", 8.0, {"matmul_conv": 1.5, "elementwise_norm": 1.0, "casts": 0.5, "host_idle": 5.0},
                matmuls=mm)
    rows = [base, tf32, bf16]
    derive_relative(rows)
    explain_rows(rows, env)
    text = bf16.explanation
    assert any(s.startswith("matmul dimensions 1001 are not multiples of 8") for s in text)
    assert any(s.startswith("the GPU waits for the host 62% of the step (5.00 ms): the step is launch-bound")
               for s in text)
    assert any(s.startswith("tf32 already runs fp32's matmuls on tensor cores (1.25x fp32): bf16 is 1.00x tf32")
               for s in text)
    assert not any("AVX512" in s for s in text)  # the CPU rule is for CPUs


def test_no_fp32_row_no_comparison():
    row = _row("bf16", 10.0, {"matmul_conv": 5.0, "other": 5.0})
    explain_rows([row], CPU_NO_FP16)
    assert row.explanation == ["no fp32 row to compare with: run --modes fp32,... for the explanation"]



def test_a_backend_that_cannot_profile_says_so(monkeypatch):
    """The plain backend of tests/bench ignores --explain: its rows say so rather than dropping the flag."""
    from ampkit.bench import driver
    from ampkit.bench.config import BenchConfig
    from ampkit.registry import _REGISTERED

    monkeypatch.setitem(_REGISTERED, "plain", "plain_backend:PlainBackend")
    report = driver.run(BenchConfig(modes="fp32,bf16", steps=2, warmup=0, explain=True), "plain")
    for row in report.results:
        assert row.status == "ok" and row.breakdown is None
        assert row.explanation == ["not profiled: the plain backend gave no breakdown for --explain"]


def test_compile_both_explains_each_group_against_its_own_fp32():
    """--compile both --explain: a compiled row is explained against the compiled fp32 row (the one its
    speedup_vs_fp32 is against), not eager fp32's breakdown and step time; compiled fp32 is its group's baseline."""
    fp32 = _row("fp32", 80.0, {"matmul_conv": 8.0, "optimizer": 40.0, "other": 32.0})
    bf16 = _row("bf16", 60.0, {"matmul_conv": 6.0, "optimizer": 30.0, "other": 24.0})
    cfp32 = _row("fp32", 40.0, {"matmul_conv": 4.0, "optimizer": 20.0, "other": 16.0})
    cbf16 = _row("bf16", 20.0, {"matmul_conv": 2.0, "optimizer": 10.0, "other": 8.0})
    cfp32.compiled = cbf16.compiled = True
    derive_relative([fp32, bf16])
    derive_relative([cfp32, cbf16])
    explain_rows([fp32, bf16, cfp32, cbf16], CPU_NO_FP16)
    assert cfp32.explanation == ["fp32 (compiled) is the baseline: optimizer 50%, other 40%, matmul_conv 10% of its step"]
    assert cbf16.explanation[0] == "bf16 (compiled) is 2.00x fp32 (compiled) here (20.00 ms vs 40.00 ms per step)"
    assert any(s.startswith("matmul_conv: matmuls/convolutions run 2.00x faster (4.00 -> 2.00 ms)") for s in cbf16.explanation)
    assert bf16.explanation[0] == "bf16 is 1.33x fp32 here (60.00 ms vs 80.00 ms per step)"


def test_emulated_fp8_states_no_speed_in_its_explanation():
    """issue #40: the row's speedup was withheld but the explanation said 'fp8 is 1.04x fp32 here'."""
    base = _row("fp32", 10.0, {"matmul_conv": 6.0, "elementwise_norm": 2.0, "optimizer": 2.0})
    fp8 = _row("fp8", 9.6, {"matmul_conv": 5.0, "elementwise_norm": 2.6, "optimizer": 2.0})
    fp8.emulated = True
    rows = [base, fp8]
    derive_relative(rows)
    explain_rows(rows, CPU_NO_FP16)
    assert fp8.speedup_vs_fp32 is None
    text = " ".join(fp8.explanation)
    assert fp8.explanation[0].startswith("fp8 is emulated here (no fp8 hardware): its step (9.60 ms vs 10.00 ms")
    assert "no speedup is stated" in text
    assert "x fp32 here" not in text and "faster" not in text and "grew most" not in text
