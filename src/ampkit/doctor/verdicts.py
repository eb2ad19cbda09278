"""What doctor does the same way for every framework: self-test each supported mode, measure it
against fp32, and turn the measurements into verdicts and one recommendation."""

from __future__ import annotations

import math
from collections.abc import Callable

from .report import ModeReport

#: speedup above which a mode counts as accelerated; below 1/this it is "slower"
ACCEL_THRESHOLD = 1.10


def speedup(base: dict, other: dict) -> float:
    """Geometric mean over the ops both measured of fp32 time / mode time."""
    ratios = [base[op]["seconds"] / other[op]["seconds"] for op in other if op in base]
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios))


def ratio_words(s: float) -> str:
    return f"{s:.2f}x as fast as fp32" if s >= 1 else f"{1 / s:.1f}x slower than fp32"


def evaluate(modes, support: Callable, selftest: Callable, microbench: Callable, *, quick: bool,
             emulation_note: Callable[[str], str] = lambda mode: "", say=None) -> tuple[dict, str, str]:
    """Reports per mode, the recommended mode and the reason.

    ``support(mode) -> (ok, why)``, ``selftest(mode) -> ("pass"|"fail"|"skip", detail)``,
    ``microbench(mode) -> {op: {"seconds", "tflops"}}``; a mode whose benchmark raises is
    reported with the error, never fatal.
    """
    say = say or (lambda msg: None)
    reports: dict[str, ModeReport] = {}
    for mode in modes:
        ok, why = support(mode)
        rep = ModeReport(supported=ok, support_reason=why)
        if not ok:
            rep.verdict, rep.reason, rep.selftest = "unsupported", why, "skip"
        else:
            say(f"self-test {mode}")
            rep.selftest, rep.selftest_detail = selftest(mode)
        reports[mode] = rep
    if not quick and reports.get("fp32") is not None and reports["fp32"].supported:
        say("micro-benchmark fp32")
        base = microbench("fp32")
        reports["fp32"].benchmark, reports["fp32"].speedup, reports["fp32"].accelerated = base, 1.0, False
        for mode, rep in reports.items():
            if mode == "fp32" or not rep.supported or rep.selftest == "fail":
                continue
            say(f"micro-benchmark {mode}")
            try:
                rep.benchmark = microbench(mode)
                rep.speedup = round(speedup(base, rep.benchmark), 4)
                rep.accelerated = rep.speedup >= ACCEL_THRESHOLD
            except Exception as exc:
                rep.benchmark = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
    for mode, rep in reports.items():
        if not rep.supported:
            continue
        if rep.selftest == "fail":
            rep.verdict, rep.reason = "broken", f"self-test failed: {rep.selftest_detail}"
        elif rep.speedup is None or mode == "fp32":
            rep.verdict = "usable"
            rep.reason = ("baseline" if mode == "fp32" else "self-test passed") + ("; speed not measured (--quick)" if quick else "")
            if "error" in rep.benchmark:
                rep.reason = f"self-test passed; micro-benchmark failed: {rep.benchmark['error']}"
        elif rep.speedup < 1 / ACCEL_THRESHOLD:
            rep.verdict = "slower"
            rep.reason = f"{mode} runs {ratio_words(rep.speedup)} here{emulation_note(mode)}"
        else:
            rep.verdict, rep.reason = "usable", f"self-test passed; matmul/conv {ratio_words(rep.speedup)}"
    recommended, reason = recommend(reports, quick)
    reports[recommended].verdict = "recommended"
    return reports, recommended, reason


def recommend(reports: dict[str, ModeReport], quick: bool) -> tuple[str, str]:
    """The fastest mode that passed its self-test and is accelerated, else fp32 (fp8 is not a training mode)."""
    candidates = [(m, r) for m, r in reports.items()
                  if m not in ("fp32", "fp8") and r.selftest == "pass" and r.accelerated]
    if candidates:
        mode, rep = max(candidates, key=lambda mr: mr[1].speedup)
        return mode, f"{mode} passed its self-test and measured {rep.speedup:.2f}x the fp32 matmul/conv speed, the fastest here"
    if quick:
        return "fp32", "speed not measured (--quick): fp32 until a measurement shows a faster mode"
    measured = [f"{m} {r.speedup:.2f}x" for m, r in reports.items() if m != "fp32" and r.speedup is not None]
    if measured:
        return "fp32", f"no low-precision mode measured faster than fp32 here ({', '.join(measured)})"
    return "fp32", "no low-precision mode is supported and working here"
