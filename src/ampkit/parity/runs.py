"""``ampkit parity --runs RUN.json...``: the user's own training runs compared as parity compares
its own -- grouped by mode, paired by seed against fp32, with the same statistics and keys.

The documents are :mod:`ampkit.runlog`'s (``"command": "run"``: mode, seed, per-step loss and step
times, evaluation metrics). The verdict is on the last evaluation's metric (accuracy when logged,
else another metric, else the final training loss, lower is better). With one run per mode there
is nothing to test: the runs are set side by side, with the difference at the end, and no verdict.
"""

from __future__ import annotations

import json
import math

from ..errors import UsageError
from ..precision import parse_mode
from .core import summarize
from .report import ALPHA, ParityReport, RunRecord

#: the metrics that say "higher is better" when a run logs them (else: the name holds "acc")
_HIGHER = ("accuracy", "eval_accuracy", "val_accuracy", "acc", "f1", "eval_f1")


def load_run(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        raise UsageError(f"--runs {path}: cannot read it: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"--runs {path}: not JSON ({exc})") from None
    if isinstance(doc, dict) and doc.get("command") != "run" and isinstance(doc.get("run"), dict):
        doc = doc["run"]  # a trainer callback's document carries its run record under "run"
    elif isinstance(doc, dict) and doc.get("command") != "run" and doc.get("command") in ("audit", "callback"):
        raise UsageError(f"--runs {path}: this trainer callback's document holds no run record (written by an "
                         "older ampkit, or a run that ended before training did)")
    if not isinstance(doc, dict) or doc.get("command", "run") != "run":
        what = doc.get("command") if isinstance(doc, dict) else type(doc).__name__
        raise UsageError(f"--runs {path}: not a run record (its command is {what!r}); write one with "
                         "mp.record(path, seed=...) in your loop")
    for key, kind in (("mode", str), ("seed", int), ("loss", list), ("eval", list)):
        if not isinstance(doc.get(key), kind) or (key == "seed" and isinstance(doc.get(key), bool)):
            hint = (" (a Keras fit: mp.callback(model, json_path=..., seed=N) records it)"
                    if key == "seed" and doc.get("framework") != "torch" else "")
            raise UsageError(f"--runs {path}: its {key!r} is missing or not a {kind.__name__}{hint}")
    doc["mode"] = parse_mode(doc["mode"])
    return doc


def _same(docs: list[dict], paths: list[str]) -> None:
    """Runs of different models, data or lengths are not one comparison: one line naming the first."""
    for key, words in (("model", "model"), ("data", "data"), ("steps", "step count"), ("framework", "framework")):
        first = docs[0].get(key)
        for doc, path in zip(docs[1:], paths[1:]):
            if doc.get(key) != first:
                raise UsageError(f"--runs {path}: its {words} {doc.get(key)!r} differs from {paths[0]}'s {first!r}; "
                                 "only runs of the same model, data and length are compared")
    seen: dict[tuple, str] = {}
    for doc, path in zip(docs, paths):
        key = (doc["mode"], doc["seed"])
        if key in seen:
            raise UsageError(f"--runs {path}: {doc['mode']} seed {doc['seed']} is also in {seen[key]}; "
                             "give each run once")
        seen[key] = path


def _metric(docs: list[dict]) -> tuple[str, bool]:
    """The metric to judge: in every run's last evaluation; ("train_loss", False) when none is."""
    common = None
    for doc in docs:
        last = doc["eval"][-1] if doc["eval"] and isinstance(doc["eval"][-1], dict) else {}
        names = {k for k, v in last.items() if k != "step" and (v is None or isinstance(v, (int, float)))
                 and not any(w in k for w in ("runtime", "per_second", "epoch"))}
        common = names if common is None else common & names
    common = common or set()
    for name in _HIGHER:
        if name in common:
            return name, True
    for name in sorted(common):
        if "acc" in name:
            return name, True
    if common:
        losses = sorted(n for n in common if "loss" in n)
        return ("loss" if "loss" in common else (losses or sorted(common))[0]), False
    return "train_loss", False


def _num(v) -> float:
    return float("nan") if v is None else float(v)


def _record(doc: dict, metric: str) -> RunRecord:
    loss = [_num(v) for v in doc["loss"]]
    value = loss[-1] if metric == "train_loss" and loss else _num((doc["eval"][-1] if doc["eval"] else {}).get(metric))
    eval_loss = (doc["eval"][-1] if doc["eval"] else {}).get("loss")
    return RunRecord(mode=doc["mode"], seed=doc["seed"], train_loss=loss, test_accuracy=[value],
                     test_loss=[_num(eval_loss)], skipped_steps=int(doc.get("skipped_steps") or 0),
                     seconds=float(doc.get("seconds") or 0.0), steps=doc.get("steps"))


def _step_time(docs: list[dict], mode: str) -> dict | None:
    """The mode's step-time speedup over fp32 (fp32's step time / the mode's, steps paired by seed
    and index; the first step -- compilation, warm-up -- left out), with its interval."""
    from ..stats import ratio_estimate

    base = {d["seed"]: d.get("step_s") or [] for d in docs if d["mode"] == "fp32"}
    ratios = []
    for d in docs:
        if d["mode"] != mode or d["seed"] not in base:
            continue
        ratios += [b / m for b, m in zip(base[d["seed"]][1:], (d.get("step_s") or [])[1:]) if b > 0 and m > 0]
    if not ratios:
        return None
    est = ratio_estimate(ratios)
    return {"speedup_vs_fp32": round(est.point, 4), "ci": est.ci, "steps": est.n}


def compare_runs(paths: list[str], tolerance: float = 0.01, margin: float | None = None) -> ParityReport:
    """The parity document of the runs in ``paths`` (see the module's docstring)."""
    if not paths:
        raise UsageError("--runs needs one or more run documents")
    docs = [load_run(p) for p in paths]
    _same(docs, paths)
    metric, higher = _metric(docs)
    modes = sorted({d["mode"] for d in docs}, key=lambda m: (m != "fp32", m))
    if "fp32" not in modes:
        raise UsageError(f"--runs: no fp32 run among {len(paths)} documents (modes {', '.join(modes)}); "
                         "the comparison is against fp32")
    records = [_record(d, metric) for d in docs]
    results = summarize(records, modes, tolerance, ALPHA, margin=margin, metric=metric, higher_is_better=higher)
    single = all(len(r.seeds) == 1 for r in results)
    for r in results:
        r.step_time = _step_time(docs, r.mode) if r.mode != "fp32" else None
        if single and r.mode != "fp32":
            base = next(x for x in results if x.mode == "fp32")
            diff = r.metric["mean"] - base.metric["mean"]
            r.verdict, r.p_value = "inconclusive", None
            r.delta_vs_fp32 = diff if math.isfinite(diff) else None
            r.reason = (f"one run per mode: no verdict (nothing to test a difference against); {metric} at the end "
                        f"{r.metric['mean']:.4g} vs fp32's {base.metric['mean']:.4g} ({diff:+.4g}); two or more runs "
                        "per mode (seeds) give the paired test, and their spread says how many decide")
            r.equivalence = {"verdict": "inconclusive", "ci": None, "seeds_needed": None, "p_value": None,
                             "degenerate": True, "margin": margin if margin is not None else tolerance,
                             "reason": "one run per mode: no equivalence test"}
    name = docs[0].get("data") or docs[0].get("model") or "your runs"
    return ParityReport(dataset=str(name), device="", results=results, environment={}, tolerance=tolerance, epochs=0,
                        margin=margin, steps=docs[0].get("steps"), metric=metric,
                        note=f"your runs: {len(docs)} run documents compared (--runs)")
