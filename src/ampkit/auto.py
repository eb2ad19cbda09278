"""``auto`` follows the measurement: the doctor's cached verdict, else a quick check, else a labelled guess.

Every framework resolves ``auto`` the same way (:func:`resolve`):

1. **The doctor's verdict, cached** (:mod:`ampkit.auto_cache`): after ``ampkit doctor`` measured on
   this environment, ``auto`` is its ``recommended`` mode, and the reason quotes what it measured
   ("the doctor measured bf16 0.55x fp32 ... on this CPU (cached 2025-06-01): fp32").
2. **A quick check** where measuring is cheap (a CPU): fp32 against bf16 in interleaved rounds with
   the doctor's own machinery (:func:`ampkit.rounds.run_rounds`, :mod:`ampkit.stats`) and its
   thresholds. First a small matmul; only when bf16's matmul interval clears
   :data:`~ampkit.words.THRESHOLD` (a CPU with real bf16 instructions, so every op is
   cheap) a short training step confirms it as the doctor's would (:data:`TRAINING_GAIN`). An
   emulated bf16 leaves at the first look (three rounds, :mod:`ampkit.rounds_sequential`). Under a
   second in all; the result is cached for the next call (``source: "quick"``) until the doctor
   measures fully.
3. **A capability guess** where nothing is cached and measuring is not cheap (a GPU), labelled as
   such in the reason: "capability guess (...); run `ampkit doctor` to measure"
   (:func:`ampkit.cpu.labelled_guess`).

Whatever the source, ``auto`` never picks a mode whose recorded measurement says it is slower than
fp32 (:func:`choose`).
"""

from __future__ import annotations

from collections.abc import Callable

from . import auto_cache
from .cpu import doctor_command, labelled_guess
from .errors import one_line
from .rounds import Plan, Work, estimate, run_rounds
from .stats import FASTER, SLOWER, Estimate, classify, ratio_text
from .words import NOT_MEASURED, TRAINING_GAIN
from .words import THRESHOLD as ACCEL_THRESHOLD

#: the quick check's rounds: small time boxes, a few rounds (a decided mode leaves at the first look, round 3)
QUICK_KERNELS = Plan(min_rounds=3, max_rounds=7, budget_s=0.3, op_box_s=0.02, max_reps=5)
QUICK_TRAINING = Plan(min_rounds=3, max_rounds=7, budget_s=0.5, op_box_s=0.05, max_reps=3)

#: quick results of this process by (cache file, fingerprint key): where the cache cannot be written,
#: auto still measures only once per process
_MEMO: dict[tuple[str, str], dict] = {}


# ---------------------------------------------------------------- the reason in words
def _x(v: float) -> str:
    return f"{ratio_text(v)}x"


def measured_words(entry: dict) -> str:
    """``bf16 matmul/conv 2.03x, training step 1.64x fp32; fp16 matmul/conv 0.01x, training step 0.06x fp32``."""
    label = entry.get("kernels_label", "matmul/conv")
    parts = []
    for mode, m in entry.get("modes", {}).items():
        if mode == "fp32" or m.get("speedup") is None:
            continue
        part = f"{mode} {label} {_x(m['speedup'])}"
        if m.get("training_speedup") is not None:
            part += f", training step {_x(m['training_speedup'])}"
        parts.append(part + " fp32")
    return "; ".join(parts) or "no low-precision mode"


def _measured_slower(m: dict) -> bool:
    """What was recorded for a mode says it is slower than fp32 (interval high end, else the point)."""
    for point, ci in ((m.get("speedup"), m.get("speedup_ci")), (m.get("training_speedup"), m.get("training_speedup_ci"))):
        if point is None:
            continue
        est = Estimate(point, ci[0] if ci else None, ci[1] if ci else None, 2 if ci else 1)
        if classify(est, ACCEL_THRESHOLD) == SLOWER:
            return True
    return m.get("verdict") in ("slower", "broken", "unsupported")


def thread_words(entry: dict, threads: int | None = None) -> str:
    """``on 1 thread`` (the count the entry was measured at), and, when ``threads`` (the count this
    process times or trains with) differs, that it does and how to measure at it."""
    measured = entry.get("threads")
    if not isinstance(measured, int) or isinstance(measured, bool):
        return ""  # an entry from before the count was recorded
    said = f"on {measured} thread" + ("" if measured == 1 else "s")
    if isinstance(threads, int) and threads != measured:
        framework = (entry.get("fingerprint") or {}).get("framework")
        said += (f", while this process runs {threads} thread{'' if threads == 1 else 's'} "
                 f"(`{doctor_command(framework)} --threads {threads}` measures at that count)")
    return said


def choose(entry: dict, where: str, *, fresh: bool = False, threads: int | None = None) -> tuple[str, str]:
    """The mode a cached (or just measured) entry gives ``auto``, and the reason quoting the
    measurement, its date and the thread count it was measured at (and ``threads``, this process's
    count, where it differs: the verdict is followed, and the reason says so)."""
    mode = entry["recommended"]
    when = ", ".join(w for w in ("just now" if fresh else f"cached {entry['measured_at'][:10]}",
                                 thread_words(entry, threads)) if w)
    if entry["source"] == "doctor":
        said = f"the doctor measured {measured_words(entry)} on {where} ({when})"
    else:
        framework = (entry.get("fingerprint") or {}).get("framework")
        said = (f"a quick check measured {measured_words(entry)} on {where} ({when}; "
                f"`{doctor_command(framework)}` measures the training steps fully)")
    rec = entry.get("modes", {}).get(mode, {})
    if mode != "fp32" and _measured_slower(rec):  # a hand-edited or inconsistent entry: never follow it into a slower mode
        return "fp32", f"{said}; {mode} was recorded as the choice but measured slower, so fp32"
    return mode, f"{said}: {mode}"


# ---------------------------------------------------------------- the doctor's verdict -> cache
def doctor_entry(report) -> dict | None:
    """The cache entry for a finished doctor report, None when it measured nothing (``--quick``, fp32 failed)."""
    fp32 = report.modes.get("fp32")
    if report.quick or fp32 is None or fp32.speedup is None:
        return None
    modes = {}
    for mode, m in report.modes.items():
        if not m.supported:
            continue
        modes[mode] = {"verdict": m.verdict, "speedup": m.speedup, "speedup_ci": m.speedup_ci,
                       "training_speedup": m.training_speedup, "training_speedup_ci": m.training_speedup_ci}
        if m.speedup_by_size:
            modes[mode]["speedup_by_size"] = {str(n): x for n, x in m.speedup_by_size.items()}
    return {"recommended": report.recommended, "reason": report.reason, "source": "doctor",
            "kernels_label": "matmul/conv", "device": report.device, "modes": modes,
            "threads": (report.environment.get("cpu") or {}).get("threads"),
            "measured_at": auto_cache.now_iso(), "ampkit_version": report.environment.get("ampkit")}


def cached_verdict(fp: dict, where: str, reports: dict) -> tuple[str | None, str]:
    """What a ``--quick`` doctor recommends: the measured verdict cached for ``fp`` (the doctor's or
    auto's quick check), dated and with its thread count, when its mode passed this run's self-test;
    else None and why (not measured, or the cached mode failing here now)."""
    entry = auto_cache.load(fp)
    if entry is None:
        return None, NOT_MEASURED
    mode, why = choose(entry, where)
    rep = reports.get(mode)
    if rep is None or not rep.supported or rep.selftest == "fail":
        state = "is not a row here" if rep is None else "is unsupported here" if not rep.supported else "failed its self-test now"
        return None, f"not measured now (--quick): the cached measurement chose {mode}, which {state} ({why})"
    return mode, f"cached measurement (--quick times nothing): {why}"


def remember_for_auto(report, fp: dict) -> str | None:
    """Cache a finished doctor report's verdict for ``fp`` (the environment it measured) and note on
    the report where (``report.auto_cache``); the cache file's path, or None when nothing was
    measured or the file could not be written."""
    entry = doctor_entry(report)
    path = auto_cache.store(fp, entry) if entry is not None else None
    report.auto_cache = str(path) if path is not None else None
    _MEMO.pop((str(auto_cache.cache_path()), auto_cache.key(fp)), None)  # the doctor's verdict wins over a quick one
    return report.auto_cache


# ---------------------------------------------------------------- the quick check
def _mode_row(kern: Estimate | None, train: Estimate | None) -> dict:
    row: dict = {}
    if kern is not None:
        row.update(speedup=round(kern.point, 4), speedup_ci=kern.ci)
    if train is not None:
        row.update(training_speedup=round(train.point, 4), training_speedup_ci=train.ci)
    return row


def quick_check(kernel_work: Callable[[str], Work], training_work: Callable[[str], Work] | None = None,
                *, mode: str = "bf16", kernels_label: str = "matmul", threads: int | None = None) -> dict:
    """fp32 against ``mode``: the kernels first; the training step only when the kernels are faster.
    ``threads``: the CPU threads the rounds ran on (recorded in the entry).

    Returns a cache entry (without fingerprint). Raises RuntimeError when fp32 or the mode could not run.
    """
    series = run_rounds([mode], kernel_work, QUICK_KERNELS, threshold=ACCEL_THRESHOLD)
    for m in ("fp32", mode):
        s = series.get(m)
        if s is None or not s.rounds:
            raise RuntimeError(f"{m} could not be timed: {s.error if s else 'no rounds'}")
    kern = estimate(series["fp32"], series[mode], "kernels")
    if kern is None:
        raise RuntimeError(f"{mode} could not be timed against fp32")
    train = None
    kern_class = classify(kern, ACCEL_THRESHOLD)
    if kern_class != FASTER:
        chosen = "fp32"
        why = (f"{mode} {kernels_label} {kern.words()} the speed of fp32 ({kern.n} rounds): "
               + ("slower" if kern_class == SLOWER else f"not {ACCEL_THRESHOLD:.2f}x faster"))
    elif training_work is None:
        chosen = mode
        why = f"{mode} {kernels_label} {kern.words()} the speed of fp32 ({kern.n} rounds)"
    else:
        s2 = run_rounds([mode], training_work, QUICK_TRAINING, threshold=ACCEL_THRESHOLD)
        train = estimate(s2["fp32"], s2[mode], "training") if s2.get(mode) and s2[mode].rounds else None
        if train is not None and train.point >= TRAINING_GAIN and (train.high is None or train.high >= 1.0):
            chosen = mode
            why = f"{mode} {kernels_label} {kern.words()} and training step {train.words()} the speed of fp32"
        else:
            chosen = "fp32"
            got = train.words() if train is not None else f"not timed ({s2[mode].error if s2.get(mode) else '?'})"
            why = (f"{mode} {kernels_label} {kern.words()} but its training step is not {TRAINING_GAIN:.2f}x "
                   f"faster than fp32 ({got})")
    verdict = "recommended" if chosen == mode else ("slower" if kern_class == SLOWER or (
        train is not None and classify(train, ACCEL_THRESHOLD) == SLOWER) else "usable")
    return {"recommended": chosen, "reason": why, "source": "quick", "kernels_label": kernels_label,
            "modes": {mode: dict(_mode_row(kern, train), verdict=verdict)}, "measured_at": auto_cache.now_iso(),
            "threads": threads}


# ---------------------------------------------------------------- resolve
def resolve(fp: dict, where: str, capability: Callable[[], tuple[str, str]],
            measure: Callable[[], dict] | None = None, *, threads: int | None = None) -> tuple[str, str]:
    """``auto`` for the environment ``fp``: cached verdict, else ``measure()`` (cached), else the
    labelled ``capability()`` guess. ``where`` names the device in the reason ("this CPU");
    ``threads``: the CPU threads this process runs (the reason says when the verdict was measured
    at another count)."""
    entry = auto_cache.load(fp)
    if entry is not None:
        return choose(entry, where, threads=threads)
    failed = ""
    if measure is not None:
        memo_key = (str(auto_cache.cache_path()), auto_cache.key(fp))
        entry = _MEMO.get(memo_key)
        if entry is not None:  # measured earlier in this process, where the cache could not be written
            return choose(entry, where, fresh=True, threads=threads)
        try:
            entry = measure()
        except Exception as exc:  # noqa: BLE001 - a failed quick check falls back to the labelled guess
            failed = f"; the quick check failed: {one_line(exc, 200)}"
        if entry is not None:
            entry = dict(entry, fingerprint=fp)
            entry.setdefault("measured_at", auto_cache.now_iso())
            if not auto_cache.valid_entry(entry):
                entry, failed = None, "; the quick check gave no usable verdict"
        if entry is not None:
            _MEMO[memo_key] = entry
            auto_cache.store(fp, entry)
            return choose(entry, where, fresh=True, threads=threads)
    mode, why = labelled_guess(*capability(), framework=fp.get("framework"))
    return mode, why + failed
