"""Bench's interleaved rounds: the plan, the pairing and the load check, framework-neutral and pure.

Every mode's process stays alive for the whole run; after a shared warm-up (each mode's warm-up
steps, in turn) the modes train in **rounds**: ``fp32, bf16, fp16 | fp16, bf16, fp32 | ...`` (the
order flips every round, as the doctor's rounds do, so a machine that slows down over the run
favours no mode), each mode a block of steps per round while the others wait. ``--steps N`` is
spread over the rounds (:func:`plan_rounds`: at most :data:`MAX_ROUNDS`, each block one step or
more), so a run still times N steps per mode.

A round's time for a mode is the fastest step of its block (blocks of :data:`MIN_BLOCK` steps or
more where ``--steps`` allows), as the doctor keeps the fastest rep of a round: another job only
ever adds time, and a step it hit is not the step the mode takes. Its **paired ratio** is fp32's
round time over the mode's, times the batch ratio: both were timed next to each other, so what the
machine did in that round (another job starting or stopping) cancels. The speedup is the median
of those ratios and its interval the distribution-free one of a median (:func:`ampkit.stats.median_interval`:
order statistics, which with ten rounds or fewer hold their 95% where a bootstrap of the median is
too narrow and missed the next run's median); ``--repeats`` adds whole runs, whose rounds pool.

**Process sets** (:func:`process_sets`, :func:`split_plan`): on a CPU a process is itself a draw --
the same mode in two fresh processes on the same CPU can differ by 10-20% in every round (not by
its address layout: with ASLR off the spread stayed), and rounds inside one process cannot see it:
an interval from them alone missed the median of the next runs. So on a CPU, with 4 rounds or more and no
``--repeats``, the rounds are split over 2 or 3 sets of processes (:data:`CPU_PROCESS_SETS`, each
set :data:`MIN_SET_ROUNDS` rounds at least), one set after the other, each set every mode in a fresh
process; the sets' rounds pool, so the interval holds the difference between processes as well as
between rounds. Measured on the built-in mlp under a bursting load (``benchmarks/bench_stability.py``):
with two sets 4 of 5 runs' intervals held the five runs' median, with three 5 of 5 and every hand
loop inside every interval. On an accelerator one set (a second CUDA context per mode is costly).

**Load check** (:func:`load_change`): per round, the machine's pace is the geometric mean over
the modes of the round's time over that mode's median round time; when the slowest round's pace
is more than :data:`LOAD_SPREAD` times the fastest's, the load changed during the run, and the
report says so in one line: the speedups stand (paired), the absolute samples/s and step times do
not.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from ..stats import Estimate, paired_estimate

#: at most this many rounds (more steps make longer blocks)
MAX_ROUNDS = 10
#: steps a block has at least, where ``--steps`` allows (the fastest of them is the round's time)
MIN_BLOCK = 2
#: the pace of the slowest round over the fastest's beyond which the load changed during the run
LOAD_SPREAD = 1.25
INTERLEAVED, SEQUENTIAL = "interleaved", "sequential"
#: on a CPU, the rounds split over at most this many sets of fresh processes, one set after the other
CPU_PROCESS_SETS = 3
#: ... each set this many rounds at least (fewer rounds than twice this: one set)
MIN_SET_ROUNDS = 2


def plan_rounds(steps: int, max_rounds: int = MAX_ROUNDS, min_block: int = MIN_BLOCK) -> list[int]:
    """The block of each round: ``steps`` spread over at most ``max_rounds`` rounds of at least
    ``min_block`` steps (fewer than ``2 * min_block`` steps: one step a round), the longer blocks
    first (``plan_rounds(25) == [3, 3, 3, 3, 3, 2, 2, 2, 2, 2]``)."""
    if steps < 1:
        return []
    return _parts(steps, min(steps // min_block if steps >= 2 * min_block else steps, max_rounds))


def _parts(n: int, k: int) -> list[int]:
    """``n`` spread over ``k`` parts as evenly as it goes, the longer parts first (``_parts(7, 3) == [3, 2, 2]``)."""
    base, extra = divmod(n, k)
    return [base + (1 if r < extra else 0) for r in range(k)]


def process_sets(rounds: int, accelerator: bool, repeats: int = 1, modes: int = 2) -> int:
    """How many sets of fresh processes a run's ``rounds`` are split over: on a CPU with one repeat
    (``--repeats N`` already times every repeat in fresh processes) and two modes or more (a speedup
    to pair), as many as give each set :data:`MIN_SET_ROUNDS` rounds, at most :data:`CPU_PROCESS_SETS`
    (4-5 rounds: 2 sets; 6 or more, the default 20 steps' 10 included: 3); else 1."""
    if accelerator or repeats != 1 or modes < 2:
        return 1
    return max(1, min(CPU_PROCESS_SETS, rounds // MIN_SET_ROUNDS))


def sets_line(rows) -> str | None:
    """The footer's sentence for rows whose rounds were split over sets of processes (None: one set)."""
    procs = max((r.processes or 1 for r in rows), default=1)
    if procs < 2:
        return None
    one = (" (a compiled row's in one: it would compile again in each)"
           if any(r.compiled and (r.processes or 1) == 1 for r in rows) else "")
    return (f"The rounds were split over {procs} sets of fresh processes, one set after the other{one}: the "
            "interval holds what changes from one process to the next, which one process's rounds cannot see; "
            "each process trains from the same seed for its warm-up and its share of the steps.")


def split_plan(blocks: Sequence[int], sets: int) -> list[list[int]]:
    """The plan's blocks in ``sets`` consecutive parts, the longer parts first
    (``split_plan([2] * 5, 2) == [[2, 2, 2], [2, 2]]``); every part holds one block or more."""
    out, i = [], 0
    for n in _parts(len(blocks), max(1, min(sets, len(blocks)))):
        out.append(list(blocks[i:i + n]))
        i += n
    return out


def round_order(modes: Sequence[str], r: int) -> list[str]:
    """The modes in round ``r``'s order: as given on even rounds, reversed on odd ones."""
    return list(modes) if r % 2 == 0 else list(reversed(modes))


def round_value(step_s: Sequence[float]) -> float:
    """A round's time for one mode: the fastest step of its block (as the doctor keeps the fastest
    rep of a round: on a shared CPU another job only ever adds time, to one step more than another)."""
    return float(min(step_s))


def split_rounds(step_s: Sequence[float], blocks: Sequence[int]) -> list[float]:
    """A mode's timed steps (in order) cut into the plan's blocks -> each round's value (a shorter
    list when the run stopped early)."""
    out, i = [], 0
    for n in blocks:
        block = step_s[i:i + n]
        if len(block) < n:
            break
        out.append(round_value(block))
        i += n
    return out


def paired_ratios(base: Sequence[float | None], mode: Sequence[float | None], base_batch: int = 1,
                  mode_batch: int = 1) -> list[float]:
    """Per round both ran (None: that mode did not finish the round): the mode's samples/s over
    fp32's in the same round, ``(mode_batch / mode_t) / (base_batch / base_t)``."""
    return [(mode_batch / m) / (base_batch / b) for b, m in zip(base, mode)
            if b is not None and m is not None and b > 0 and m > 0]


def paired_speedup(base: Sequence[float | None], mode: Sequence[float | None], base_batch: int = 1,
                   mode_batch: int = 1) -> Estimate | None:
    """The median of the paired ratios and its distribution-free interval
    (:func:`ampkit.stats.paired_estimate`; None: no round in common)."""
    ratios = paired_ratios(base, mode, base_batch, mode_batch)
    return paired_estimate(ratios) if ratios else None


def round_pace(rounds: dict[str, Sequence[float | None]]) -> list[float | None]:
    """Per round: the geometric mean over the modes that ran it of (its time / that mode's median
    round time, on the log scale); 1.0 is a round at the run's typical pace, 2.0 one where every mode took twice as long."""
    medians = {m: math.exp(statistics.median([math.log(t) for t in ts if t])) for m, ts in rounds.items() if any(ts)}
    n = max((len(ts) for ts in rounds.values()), default=0)
    pace: list[float | None] = []
    for r in range(n):
        logs = [math.log(ts[r] / medians[m]) for m, ts in rounds.items()
                if m in medians and r < len(ts) and ts[r]]
        pace.append(math.exp(sum(logs) / len(logs)) if logs else None)
    return pace


def load_change(rounds: dict[str, Sequence[float | None]], spread: float = LOAD_SPREAD, first: int = 1) -> dict | None:
    """``{"spread", "slowest_round", "fastest_round", "line"}`` when the machine's pace changed by more
    than ``spread`` between rounds (fewer than 3 rounds: not judged), else None; ``first``: the run's
    number of the first of ``rounds`` (a later set of processes' rounds)."""
    pace = round_pace(rounds)
    known = [(p, r) for r, p in enumerate(pace) if p is not None]
    if len(known) < 3:
        return None
    (lo, fast), (hi, slow) = min(known), max(known, key=lambda pr: (pr[0], -pr[1]))  # ties: the first round
    ratio = hi / lo
    if ratio <= spread:
        return None
    slow, fast = slow + first, fast + first
    line = (f"the machine's load changed during the run: round {slow} ran {ratio:.1f}x slower than round "
            f"{fast} for every mode alike (another job); the speedups are paired per round and hold, the "
            "samples/s and step times do not -- for throughput figures rerun on an idle machine "
            "(or add --repeats 3)")
    return {"spread": round(ratio, 4), "slowest_round": slow, "fastest_round": fast, "line": line}
