"""``bench --explain``'s measurement: a profiled step grouped into categories, the same way for every framework."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .words import CATEGORIES, HOST_IDLE

#: the categories in words, for sentences and legends
WORDS = {"matmul_conv": "matmuls/convolutions", "elementwise_norm": "elementwise ops and norms",
         "casts": "dtype casts and copies", "optimizer": "the optimizer step", "loss_scaling": "loss scaling",
         "other": "other (framework overhead)", HOST_IDLE: "host idle (the device waits for the host)"}


@dataclass
class Breakdown:
    """One mode's profiled step: ``ms`` per category per step and its ``shares`` (summing to 1)."""

    ms: dict[str, float]
    shares: dict[str, float]
    step_ms: float                     # the profiled step's wall time (profiler overhead included)
    steps: int                         # steps profiled
    source: str                        # what measured it ("torch.profiler, CPU self time")
    matmuls: list = field(default_factory=list)  # [{"m", "n", "k", "ms"}] the model's matmuls, most time first
    approximate: str | None = None     # why the figures are only an approximation, when they are

    def to_detail(self) -> dict:
        d = asdict(self)
        d.pop("shares")
        return d


def from_op_times(ms: dict[str, float], step_ms: float, steps: int, source: str, *, gpu: bool = False,
                  device_busy_ms: float | None = None, matmuls=None, approximate: str | None = None) -> Breakdown:
    """``ms``: per category, the ops' time per step (CPU: self time on the host; GPU: kernel time).

    CPU: the step's wall time no op covers is added to ``other``. GPU: ``host_idle`` is the wall
    time the device was idle (``step_ms - device_busy_ms``, the union of kernel intervals)."""
    cats = {c: max(0.0, float(ms.get(c, 0.0))) for c in CATEGORIES}
    if gpu:
        busy = device_busy_ms if device_busy_ms is not None else sum(cats.values())
        cats[HOST_IDLE] = max(0.0, step_ms - busy)
    else:
        cats["other"] += max(0.0, step_ms - sum(cats.values()))
    total = sum(cats.values())
    shares = {c: (v / total if total > 0 else 0.0) for c, v in cats.items()}
    return Breakdown(ms={c: round(v, 4) for c, v in cats.items()}, shares={c: round(v, 4) for c, v in shares.items()},
                     step_ms=round(step_ms, 4), steps=steps, source=source, matmuls=list(matmuls or []),
                     approximate=approximate)


def top_matmuls(shapes: list[tuple], limit: int = 5, steps: int | None = None) -> list[dict]:
    """``(m, n, k, ms)`` of every matmul call seen -> the ``limit`` shapes with the most time, merged;
    with ``steps`` (the profiled steps, when each tuple is one call) each gains ``calls`` per step."""
    merged: dict[tuple[int, int, int], list] = {}
    for m, n, k, t in shapes:
        got = merged.setdefault((m, n, k), [0.0, 0])
        got[0] += t
        got[1] += 1
    ranked = sorted(merged.items(), key=lambda kv: -kv[1][0])[:limit]
    return [{"m": m, "n": n, "k": k, "ms": round(t, 4), **({"calls": round(c / steps, 2)} if steps else {})}
            for (m, n, k), (t, c) in ranked]


def explain_steps(steps: int) -> int:
    """Steps to profile after ``steps`` timed ones: a few (1-3), so --explain adds little wall time."""
    return max(1, min(3, steps // 6))
