"""One document for a multi-process run: the ranks' records merged by rank 0."""

from __future__ import annotations

__all__ = ["merge_rank_documents", "roles"]

_PHASE = {"forward": 0, "loss": 1, "backward": 2}


def roles(firsts: dict[int, dict | None]) -> tuple[int | None, dict[int, str], str]:
    """``firsts``: per rank its ``first_nonfinite`` (None: stayed finite). Returns the origin rank
    (None: none, or not decidable), each rank's role (``origin``, ``received``, ``also``: its own
    forward went non-finite at the origin's step too, ``clean``, ``undecided``) and one sentence."""
    seen = {r: f for r, f in firsts.items() if f}
    if not seen:
        return None, {r: "clean" for r in firsts}, "no rank saw an inf/NaN"
    step = min(int(f.get("step") or 0) for f in seen.values())
    at = {r: f for r, f in seen.items() if int(f.get("step") or 0) == step}
    own = sorted((r for r, f in at.items() if f.get("phase") in ("forward", "loss")),
                 key=lambda r: (_PHASE.get(at[r].get("phase"), 3), r))
    out: dict[int, str] = {}
    if not own:   # gradients only, everywhere, at the same step: the all-reduce mixed them
        for r in firsts:
            out[r] = "undecided" if r in at else "received" if r in seen else "clean"
        why = (f"at step {step} every rank that went non-finite saw it first in gradients after the all-reduce "
               f"(ranks {sorted(at)}): the rank that produced it cannot be told apart")
        return None, out, why
    origin = own[0]
    for r in firsts:
        if r == origin:
            out[r] = "origin"
        elif r in own:
            out[r] = "also"
        else:
            out[r] = "received" if r in seen else "clean"
    recv = sorted(r for r, v in out.items() if v == "received")
    f = at[origin]
    why = (f"rank {origin} went non-finite first, at step {step} in the {f.get('phase')} of {f.get('name')}"
           + (f"; rank(s) {recv} only received it through the collectives (gradient all-reduce, then synced weights)"
              if recv else ""))
    return origin, out, why


def merge_rank_documents(docs: list[dict], paths: list[str | None] | None = None) -> dict:
    """The run's document from each rank's (index = rank) document."""
    firsts = {r: d.get("first_nonfinite") for r, d in enumerate(docs)}
    origin, role, why = roles(firsts)
    base = dict(docs[origin if origin is not None else 0])
    first = None
    if origin is not None:
        first = {**firsts[origin], "rank": origin}
    elif any(firsts.values()):
        r0 = min(r for r, f in firsts.items() if f)
        first = {**firsts[r0], "rank": None}
    base["first_nonfinite"] = first
    base["ranks"] = [{"rank": r, "role": role[r], "first_nonfinite": firsts[r],
                      "document": (paths[r] if paths and firsts[r] else None)} for r in range(len(docs))]
    base["cross_rank"] = why
    base["world_size"] = len(docs)
    base.pop("rank", None)
    summary = dict(base.get("summary") or {})
    summary["first_nonfinite"] = first
    summary["cross_rank"] = why
    base["summary"] = summary
    if origin is None and first is not None:   # no origin: keep the finding, say why no rank is named
        base["findings"] = [{**f, "advice": f"{f.get('advice', '')} ({why})"} if f.get("kind") == "nonfinite" else f
                            for f in base.get("findings") or []]
    base["note"] = f"{base.get('note', '')} [{len(docs)} ranks: {why}]"
    return base
