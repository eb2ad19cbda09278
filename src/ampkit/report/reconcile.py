"""When the doctor and bench of one environment disagree, the report's verdicts say so.

Two disagreements, both read from each document's own verdict words (never a point estimate alone):

- the doctor *recommends* a mode that bench measured *slower* than fp32 on its workload;
- the doctor calls a mode *slower* and bench measured it *faster*.

Each becomes one verdict row ("doctor vs bench mlp: bf16") in words, next to bench's explanation
when the bench ran with ``--explain`` (its first sentences: the category that grew most, the size
rule), else a pointer to ``--explain``. Agreeing documents add nothing. Documents of different
frameworks are never compared (a Keras bench says nothing about the torch doctor).
"""

from __future__ import annotations

#: the bench row's speedup reads slower/faster below/above these when it has no verdict words (old documents)
_SLOWER, _FASTER = 1 / 1.10, 1.10


def _framework(view) -> str | None:
    doc = getattr(view, "doc", None)
    return getattr(doc, "framework", None) if doc is not None else None


def _bench_says(row: dict) -> str | None:
    if row.get("status") != "ok" or row.get("flags") or row.get("speedup") is None:
        return None
    verdict = row.get("speedup_verdict")
    if verdict in ("slower", "faster"):
        return verdict
    if verdict is None:  # one run without an interval: only a clear ratio counts
        return "slower" if row["speedup"] < _SLOWER else "faster" if row["speedup"] > _FASTER else None
    return None


def _why(row: dict) -> str:
    sentences = [s for s in row.get("explanation") or [] if isinstance(s, str)]
    if not sentences:
        return "run `ampkit bench --explain` for a breakdown of why"
    picked = [s for s in sentences[1:] if s.split(" ", 1)[0] in ("casts", "matmul_conv", "elementwise_norm",
                                                                 "optimizer", "loss_scaling", "other", "host_idle")
              or s.startswith(("the model's", "this CPU", "the GPU", "matmul dimensions", "tf32"))]
    return "bench's explanation: " + "; ".join((picked or sentences[1:] or sentences)[:3])


def _sizes(mode: str, table) -> str:
    """``"0.67x at 64², 2.17x at 256², 2.21x at 1024²"`` from the doctor's ``speedup_by_size``."""
    if not isinstance(table, dict):
        return ""
    try:
        return ", ".join(f"{float(x):.2f}x at {int(n)}²" for n, x in sorted(table.items(), key=lambda kv: int(kv[0]))
                         if isinstance(x, (int, float)))
    except (TypeError, ValueError):  # a foreign table in an otherwise valid document
        return ""


def disagreements(env) -> list[dict]:
    """Verdict rows for every doctor/bench disagreement in one environment (``[]`` when they agree)."""
    out = []
    for dv in env.doctor:
        if dv.quick:
            continue  # a --quick doctor measured nothing: nothing to disagree with
        modes = {r["mode"]: r for r in dv.rows}
        for bv in env.bench:
            if _framework(dv) and _framework(bv) and _framework(dv) != _framework(bv):
                continue
            for row in bv.rows:
                mode = row["mode"]
                d = modes.get(mode)
                says = _bench_says(row)
                if mode == "fp32" or d is None or says is None:
                    continue
                measured = f"{row['speedup']:.2f}× fp32"
                if row.get("speedup_ci"):
                    measured += f" [{row['speedup_ci'][0]:.2f}, {row['speedup_ci'][1]:.2f}]"
                kernels = f"kernels {d['speedup']:.2f}×" if d.get("speedup") is not None else "measured"
                if dv.recommended == mode and says == "slower":
                    text = (f"they disagree: the doctor recommends {mode} ({kernels}"
                            + (f", training {d['training_speedup']:.2f}×" if d.get("training_speedup") else "")
                            + f" on its own small ops), but bench {bv.workload} measured {mode} slower: {measured}; "
                            + _why(row))
                elif d.get("verdict") == "slower" and says == "faster":
                    text = (f"they disagree: the doctor calls {mode} slower ({kernels} on its own small ops), but "
                            f"bench {bv.workload} measured {mode} faster: {measured}; " + _why(row))
                else:
                    continue
                sizes = _sizes(mode, d.get("speedup_by_size"))
                if sizes:
                    text += f"; the doctor's size table: {sizes}"
                out.append({"key": f"doctor vs bench {bv.workload}: {mode}", "text": text, "tone": "bad"})
    return out
