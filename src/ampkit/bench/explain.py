"""``bench --explain``'s sentences: each mode's profiled step against fp32's, framework-neutral.

Every sentence is computed from measured inputs only: the per-category milliseconds of each mode's
profiled step (:mod:`ampkit.breakdown`), the model's matmul shapes the profiler recorded, the
size table (the doctor's matmul at small, medium and large sizes, vs fp32), the CPU's ISA flags
(:mod:`ampkit.cpu`), the device's compute capability, and the other rows (a tf32 baseline).
The rules, in order:

1. the ratio: "bf16 is 0.45x fp32 here (12.1 ms vs 5.4 ms per step)";
2. a mode slower than fp32: the category that grew most, with its milliseconds;
3. matmuls/convolutions: how much faster or slower they ran and their share of fp32's step;
4. casts and loss scaling: what they add;
5. the model's matmul sizes against the size table ("too small to gain" / "large enough");
6. a CPU without native instructions for the mode; on a GPU, dimensions not multiples of 8 (16
   for fp8), a launch-bound step (``host_idle``), a tf32 baseline that already uses tensor cores.
"""

from __future__ import annotations

import math

from ..breakdown import CATEGORIES, HOST_IDLE, WORDS
from ..stats import ratio_text
from ..words import row_label

#: a size-table speedup at least this large counts as "gains" (the doctor's threshold)
GAIN = 1.10
#: a matmul call shorter than this (fp32, µs) is about as long as the per-op work around it
SMALL_CALL_US = 50.0
#: host_idle above this share of the step: launch-bound
LAUNCH_BOUND = 0.30


def _ms(row, cat: str) -> float:
    return float((row.breakdown_ms or {}).get(cat, 0.0))


def _x(r: float) -> str:
    return f"{ratio_text(r)}x" if r < 10 else f"{r:.0f}x"


def representative_size(matmuls: list[dict]) -> tuple[float, str] | None:
    """The time-weighted geometric size of the model's matmuls and the largest one in words ("64x784 @ 784x1024")."""
    if not matmuls:
        return None
    weight = sum(m.get("ms", 0.0) for m in matmuls) or float(len(matmuls))
    log_size = sum((m.get("ms", 0.0) or weight / len(matmuls)) * math.log(max(1, m["m"] * m["n"] * m["k"])) / 3
                   for m in matmuls) / weight
    top = matmuls[0]
    return math.exp(log_size), f"{top['m']}x{top['k']} @ {top['k']}x{top['n']}"


def size_rule(mode: str, matmuls: list[dict], table: dict | None, source: str | None,
              matmul_share: float | None = None, measured: float | None = None,
              base_matmuls: list[dict] | None = None) -> str | None:
    """The model's matmuls against the size table (an isolated square matmul in ``mode`` vs fp32 at
    each size): what their size predicts, then what they did in the step.

    The prediction: the table's speedup at the nearest size, bounded by the matmuls' share of fp32's
    step (Amdahl, ``matmul_share``); a matmul whose one call takes under :data:`SMALL_CALL_US` in
    fp32 (``base_matmuls``: fp32's profiled calls) is too small whatever the kernel gains, since the
    per-op work around it (dispatch, autocast's casts) is of the same size. ``measured``: how much
    faster the model's own matmuls ran inside the step (fp32's matmul_conv ms over the mode's)."""
    rep = representative_size(matmuls)
    if rep is None:
        return None
    size, words = rep
    text = f"the model's largest matmul is {words} (time-weighted size about {size:.0f})"
    points = {int(k): v for k, v in (table or {}).items() if isinstance(v, dict) and v.get("speedup")}
    if not points:
        return text + "; no size table was measured for " + mode
    near = min(points, key=lambda n: abs(math.log(n) - math.log(max(size, 1.0))))
    cite = ", ".join(f"{_x(points[n]['speedup'])} at {n}²" for n in sorted(points))
    got, ci = points[near]["speedup"], points[near].get("ci")
    at = f"{_x(got)}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "") + f" at {near}²"
    below = f", below the table's smallest size {near}²" if near == min(points) and size < near / 1.4 else ""
    bound = 1.0 / ((1.0 - matmul_share) + matmul_share / got) if matmul_share is not None and got > 0 else None
    call_us = per_call_us(base_matmuls or matmuls)
    if got < 1 / GAIN:
        verdict = f"the size table predicts slower matmuls at this size in {mode} ({at})"
    elif call_us is not None and call_us < SMALL_CALL_US:
        verdict = (f"too small to gain{below}: each of its matmuls takes about {call_us:.0f} µs in fp32, the size of "
                   f"the per-op work around it (dispatch, autocast's casts), so a faster kernel ({mode} {at} in "
                   "the size table) saves little")
    elif got < GAIN:
        verdict = f"too small to gain: the size table measures {mode} {at}"
    elif bound is not None and bound < GAIN:
        verdict = (f"large enough for faster matmuls (the size table: {at}), but with matmuls {matmul_share:.0%} of "
                   f"fp32's step the whole step can gain at most {_x(bound)}")
    else:
        verdict = (f"large enough to gain (the size table: {at}" + (f"; each call about {call_us:.0f} µs in fp32"
                                                                    if call_us is not None else "")
                   + (f"; with matmuls {matmul_share:.0%} of fp32's step, up to {_x(bound)} for the whole step)"
                      if bound is not None else ")"))
    if measured is not None:
        verdict += f"; in this step its matmuls ran {_x(measured)}"
        if got >= GAIN and measured < GAIN and not (call_us is not None and call_us < SMALL_CALL_US):
            verdict += (" — less than the table predicts: the casts and per-op work around them, or other "
                        "processes on this CPU, took the kernel's gain")
    return f"{text} — {verdict}; size table ({source or 'measured'}): {mode} {cite} vs fp32"


def per_call_us(matmuls: list[dict]) -> float | None:
    """The time-weighted mean fp32 time of one matmul call, in µs (None without call counts)."""
    timed = [m for m in matmuls if m.get("calls") and m.get("ms")]
    if not timed:
        return None
    total = sum(m["ms"] for m in timed)
    return sum(m["ms"] * (m["ms"] / m["calls"]) for m in timed) / total * 1e3


def cpu_rule(mode: str, env: dict) -> str | None:
    """A CPU without native instructions for the mode (the ISA flags of the environment)."""
    from ..cpu import cpu_has_fast_bf16, cpu_has_fast_fp16

    cpu = env.get("cpu") or {}
    if not cpu or mode not in ("bf16", "fp16"):
        return None
    if mode == "bf16" and not cpu_has_fast_bf16(cpu):
        return "this CPU has no AVX512-BF16 or AMX-BF16 instructions: bf16 matmuls are emulated"
    if mode == "fp16" and not cpu_has_fast_fp16(cpu):
        return "this CPU has no AVX512-FP16 or AMX-FP16 instructions: fp16 matmuls are emulated"
    return None


def gpu_rules(row, base, rows, env: dict) -> list[str]:
    """Dimensions that do not suit tensor cores, a launch-bound step, a tf32 baseline."""
    out = []
    mult = 16 if row.mode == "fp8" else 8
    if row.mode in ("fp16", "bf16", "tf32", "fp8"):
        dims = sorted({d for m in (row.explain_detail or {}).get("matmuls", []) for d in (m["n"], m["k"])
                       if d % mult})
        if dims:
            out.append(f"matmul dimensions {', '.join(map(str, dims[:6]))} are not multiples of {mult}: "
                       f"tensor cores run those matmuls padded or not at all (pad the layers to a multiple of {mult})")
    idle = (row.breakdown or {}).get(HOST_IDLE, 0.0)
    if idle >= LAUNCH_BOUND:
        out.append(f"the GPU waits for the host {idle:.0%} of the step ({_ms(row, HOST_IDLE):.2f} ms): the step is "
                   "launch-bound, so faster kernels cannot shorten it (a larger batch, CUDA graphs or torch.compile can)")
    tf32 = next((r for r in rows if r.mode == "tf32" and r.status == "ok" and r.samples_per_s), None)
    if row.mode in ("fp16", "bf16") and tf32 is not None and base.samples_per_s and row.samples_per_s:
        over_tf32 = row.samples_per_s / tf32.samples_per_s
        out.append(f"tf32 already runs fp32's matmuls on tensor cores ({_x(tf32.samples_per_s / base.samples_per_s)} "
                   f"fp32): {row.mode} is {_x(over_tf32)} tf32")
    return out


def explain_row(row, base, rows, env: dict, *, gpu: bool) -> list[str]:
    if row is base:
        shares = row.breakdown or {}
        top = sorted((c for c in shares if shares[c] > 0), key=lambda c: -shares[c])[:3]
        return [f"{row_label(row)} is the baseline: " + ", ".join(f"{c} {shares[c]:.0%}" for c in top) + " of its step"]
    ratio = row.speedup_vs_fp32 or (base.step_ms["p50"] / row.step_ms["p50"]
                                    if base.step_ms.get("p50") and row.step_ms.get("p50") else None)
    out = []
    if getattr(row, "emulated", False):  # torchao's emulation: its time is not fp8's, so no ratio is said
        out.append(f"{row_label(row)} is emulated here (no fp8 hardware): its step ({row.step_ms['p50']:.2f} ms vs "
                   f"{base.step_ms['p50']:.2f} ms for {row_label(base)}) times torchao's emulation, not fp8 kernels, "
                   "so no speedup is stated")
        ratio = None
    elif ratio:
        out.append(f"{row_label(row)} is {_x(ratio)} {row_label(base)} here ({row.step_ms['p50']:.2f} ms vs "
                   f"{base.step_ms['p50']:.2f} ms per step)")
    cats = [*CATEGORIES, HOST_IDLE]
    deltas = {c: _ms(row, c) - _ms(base, c) for c in cats}
    if ratio and ratio < 1:
        grew = max(deltas, key=deltas.get)
        out.append(f"{grew} grew most: {_ms(base, grew):.2f} -> {_ms(row, grew):.2f} ms per step "
                   f"(+{deltas[grew]:.2f} ms; {row.breakdown.get(grew, 0):.0%} of the {row.mode} step, "
                   f"{base.breakdown.get(grew, 0):.0%} of fp32's) — {WORDS[grew]}")
    mm_base, mm = _ms(base, "matmul_conv"), _ms(row, "matmul_conv")
    if mm_base > 0 and mm > 0 and not getattr(row, "emulated", False):
        r = mm_base / mm
        how = f"run {_x(r)} faster" if r >= 1 else f"run {_x(1 / r)} slower"
        out.append(f"matmul_conv: matmuls/convolutions {how} ({mm_base:.2f} -> {mm:.2f} ms) and were "
                   f"{base.breakdown.get('matmul_conv', 0):.0%} of the fp32 step")
    if deltas["casts"] > 0 and row.breakdown.get("casts", 0) >= 0.01:
        out.append(f"casts: dtype casts add {deltas['casts']:.2f} ms ({row.breakdown['casts']:.0%} of the step)")
    if _ms(row, "loss_scaling") > 0 and row.breakdown.get("loss_scaling", 0) >= 0.005:
        out.append(f"loss_scaling: unscaling, inf checks and the scale update cost {_ms(row, 'loss_scaling'):.2f} ms "
                   f"({row.breakdown['loss_scaling']:.0%} of the step)")
    detail = row.explain_detail or {}
    sized = size_rule(row.mode, detail.get("matmuls") or (base.explain_detail or {}).get("matmuls") or [],
                      detail.get("size_table"), detail.get("size_table_source"),
                      (base.breakdown or {}).get("matmul_conv"), mm_base / mm if mm_base > 0 and mm > 0 else None,
                      (base.explain_detail or {}).get("matmuls"))
    if sized:
        out.append(sized)
    if gpu:
        out += gpu_rules(row, base, rows, env)
    else:
        isa = cpu_rule(row.mode, env)
        if isa:
            out.append(isa)
    if detail.get("approximate"):
        out.append(f"approximate: {detail['approximate']}")
    return out


def explain_rows(rows, env: dict) -> None:
    """Set ``explanation`` on every ok row with a breakdown, against fp32's (none without fp32)."""
    gpu = bool(env.get("compute_capability")) or str(env.get("device", "")).startswith(("cuda", "gpu", "/gpu"))
    bases = {c: next((r for r in rows if r.mode == "fp32" and r.status == "ok" and r.breakdown
                      and bool(getattr(r, "compiled", False)) == c), None) for c in (False, True)}
    for row in rows:
        base = bases[bool(getattr(row, "compiled", False))]  # --compile both: each group against its own fp32
        if row.status != "ok":
            continue
        if row.breakdown and (row.step_ms or {}).get("p50"):  # the row's median (after --repeats: over the repeats)
            row.breakdown_ms = {c: round(v * row.step_ms["p50"], 4) for c, v in row.breakdown.items()}
        if not row.breakdown:  # a backend that cannot profile says so, rather than dropping the flag silently
            row.explanation = [f"not profiled: the {env.get('framework') or 'framework'} backend gave no breakdown "
                               "for --explain"]
            continue
        if base is None:
            row.explanation = ["no fp32 row to compare with: run --modes fp32,... for the explanation"]
            continue
        row.explanation = explain_row(row, base, rows, env, gpu=gpu)
