"""The seeds x modes grid of a parity run, wherever its runs go.

A grid is its modes, its seeds and its identity: what every run trains (dataset or factories,
epochs or steps, lr, batch size), what the verdicts judge (tolerance, margin, metric) and where
(the environment's fingerprint: ampkit, framework and its version, Python, device kind and name).
Its runs are ordered seeds outermost, as the serial loop runs them (:func:`plan`); a shard ``I/N``
holds runs ``k`` with ``k % N == I - 1``, and so does rank ``I - 1`` of ``N`` under torchrun. A run
is the same wherever it runs: its seed fixes the initial weights and the data order.

A document that holds a grid's runs carries ``"grid": {"modes", "seeds", "identity"}``;
:func:`merge` joins documents of one grid (shards, a resumed document and more seeds) and
:func:`held` gives what ``--resume`` keeps.
"""

from __future__ import annotations

import os

from ..errors import UsageError
from .chance import Chance
from .core import _broken_words, baseline_problem, summarize
from .report import ParityReport, RunRecord

#: the environment keys two parts must share: the same software on the same kind of device
FINGERPRINT = ("ampkit", "framework", "framework_version", "python", "device", "device_name", "compute_capability")


def parse_shard(text: str) -> tuple[int, int]:
    """``"2/3"`` -> ``(2, 3)``; anything else is one usage line."""
    try:
        i, n = (int(x) for x in str(text).split("/"))
    except ValueError:
        raise UsageError(f"--shard must look like I/N (the I-th of N shares, 1-based, e.g. 2/3); received {text!r}") \
            from None
    if not 1 <= i <= n:
        raise UsageError(f"--shard {text}: I must be between 1 and N (the shares are 1/{n} .. {n}/{n})")
    return i, n


def fingerprint(environment: dict) -> dict:
    """The parts of an environment that make runs comparable (never the host name or the GPU index)."""
    fp = {k: environment.get(k) for k in FINGERPRINT}
    if isinstance(fp["device"], str):
        fp["device"] = fp["device"].split(":")[0]  # cuda:3 on one rank, cuda:0 on another: the same kind
    return fp


def identity(config, data, epochs: int | None, environment: dict) -> dict:
    """What every run of the grid trains and how it is judged; two documents of one grid have equal identities."""
    model = data.model_spec or (data.model if isinstance(data.model, str) else getattr(data.model, "__name__", "model"))
    return _plain({"dataset": data.name, "model": model, "data": data.data_spec, "epochs": None if config.steps else epochs,
            "steps": config.steps, "lr": data.lr, "batch_size": data.batch_size, "tolerance": config.tolerance,
            "margin": config.equivalence_margin, "metric": data.metric, "environment": fingerprint(environment)})


def _plain(obj):
    """As a document holds it (tuples are lists): an identity read back compares equal to one made here."""
    import json

    return json.loads(json.dumps(obj, default=str))


def plan(modes: list[str], seeds: list[int]) -> list[tuple[int, str]]:
    """Every (seed, mode) run of the grid, seeds outermost."""
    return [(s, m) for s in seeds for m in modes]


def share(runs: list, index: int, count: int) -> list:
    """The ``index``-th (1-based) of ``count`` shares: every ``count``-th run from ``index - 1``."""
    return runs[index - 1::count]


def union(first: list, second: list) -> list:
    out = list(dict.fromkeys([*first, *second]))
    return (["fp32"] + [m for m in out if m != "fp32"]) if "fp32" in out else out


def same_grid(a: dict, b: dict, name_a: str, name_b: str) -> None:
    """Refuse two identities that differ, naming the first difference."""
    for key in [*a, *(k for k in b if k not in a)]:  # in the order the grid names them
        va, vb = a.get(key), b.get(key)
        if key == "environment" and isinstance(va, dict) and isinstance(vb, dict):
            diff = next((k for k in FINGERPRINT if va.get(k) != vb.get(k)), None)
            if diff:
                raise UsageError(f"{name_b} belongs to another grid than {name_a}: its environment's {diff} is "
                                 f"{vb.get(diff)!r}, {name_a}'s {va.get(diff)!r} (runs compare only on the same software "
                                 "and device kind)")
        elif va != vb:
            raise UsageError(f"{name_b} belongs to another grid than {name_a}: its {key} is {vb!r}, {name_a}'s {va!r}")


def read(path: str) -> ParityReport:
    """A parity document holding a grid, or one usage line naming the file."""
    from ..envelope import DocumentError, not_a_document, open_envelope, read_json

    doc = read_json(path)
    try:
        command = open_envelope(doc)
        report = ParityReport.from_dict(doc) if command == "parity" else None
    except DocumentError as exc:
        raise not_a_document(path, exc) from None
    if report is None:
        raise UsageError(f"{path}: a {command} document, not a parity document")
    if not report.grid or not isinstance(report.grid.get("identity"), dict):
        raise UsageError(f"{path}: a parity document without a grid (written by an older ampkit); "
                         "re-run it with this one to grow or merge it")
    return report


def runs_of(report: ParityReport) -> list[RunRecord]:
    """Every run the document holds: its results' and the unpaired runs an interruption left."""
    return [run for r in report.results for run in r.runs] + list(report.unpaired_runs)


def held(report: ParityReport, ident: dict, path: str) -> list[RunRecord]:
    """``--resume PATH``: the runs ``PATH`` holds that need not run again (a run that raised runs again)."""
    same_grid(report.grid["identity"], ident, path, "this run")
    return [run for run in runs_of(report) if not run.error]


def build(records: list[RunRecord], grid: dict, *, dataset: str, device: str, environment: dict,
          higher_is_better: bool = True, shard: str | None = None, chance=None, **fields) -> ParityReport:
    """The report of a grid's runs: the verdicts over them, or for a partial document (``shard``)
    the statistics only, every mode's verdict ``inconclusive`` until the parts are merged.
    ``chance``: the data's constant predictor (:class:`~ampkit.parity.chance.Chance` or its dict)."""
    ident = grid["identity"]
    tolerance, margin, metric = ident["tolerance"], ident["margin"], ident["metric"]
    modes = [m for m in grid["modes"] if any(r.mode == m for r in records)]
    chance = Chance.from_dict(chance) if isinstance(chance, dict) else chance
    unlearned = None
    if shard is None:
        results = summarize(records, modes, tolerance, margin=margin, metric=metric, higher_is_better=higher_is_better,
                            chance=chance)
        unlearned = baseline_problem(records, chance, higher_is_better)
    else:  # each mode on its own: its statistics, no pairing, no verdict
        total = len(grid["modes"]) * len(grid["seeds"])
        why = (f"partial document (shard {shard}: {len(records)} of the grid's {total} runs): no verdict until the "
               "parts are merged (ampkit parity --merge PART.json ...)")
        results = []
        for m in modes:
            runs = [r for r in records if r.mode == m]
            (r,) = summarize(runs, [m], tolerance, margin=margin, metric=metric, higher_is_better=higher_is_better)
            if r.mode != "fp32":
                r.verdict, r.delta_vs_fp32, r.p_value, r.equivalence = "inconclusive", None, None, None
            r.reason = why + (f"; {_broken_words(runs)[1]}" if r.nonfinite_seeds else "")
            results.append(r)
    return ParityReport(dataset, device, results, environment, tolerance, ident["epochs"], margin=margin,
                        steps=ident["steps"], metric=metric, grid=grid, shard=shard,
                        chance=chance.to_dict() if chance is not None else None, baseline_not_learned=unlearned, **fields)


def _label(path: str, shard: str | None) -> str:
    return f"{os.path.basename(path)}" + (f" (shard {shard})" if shard else "")


def merge(paths: list[str]) -> ParityReport:
    """Documents of one grid (shards, a resumed document, parts adding seeds or modes) -> one
    document with the verdicts over all their runs. Parts of different grids, a run held twice, or
    a run of a part's grid that no part holds: one usage line naming it."""
    if len(paths) < 1:
        raise UsageError("--merge needs the partial documents: ampkit parity --merge part1.json part2.json ...")
    parts = [(p, read(p)) for p in paths]
    first_path, first = parts[0]
    modes, seeds = [], []
    owner: dict[tuple[str, int], str] = {}
    records: list[RunRecord] = []
    for path, rep in parts:
        same_grid(first.grid["identity"], rep.grid["identity"], _label(first_path, first.shard), _label(path, rep.shard))
        modes, seeds = union(modes, list(rep.grid.get("modes") or [])), sorted(set(seeds) | set(rep.grid.get("seeds") or []))
        for run in runs_of(rep):
            key = (run.mode, run.seed)
            if key in owner:
                again = "the same part given twice?" if owner[key] == _label(path, rep.shard) else "overlapping parts?"
                raise UsageError(f"run {run.mode} seed {run.seed} is in both {owner[key]} and {_label(path, rep.shard)} "
                                 f"({again}); give each run once")
            owner[key] = _label(path, rep.shard)
            records.append(run)
    _same_plans(parts)
    missing = [(m, s) for path, rep in parts for s, m in plan(rep.grid["modes"], rep.grid["seeds"])
               if (m, s) not in owner]
    if missing:
        missing = list(dict.fromkeys(missing))
        hint = _missing_shards(parts, missing)
        shown = ", ".join(f"{m} seed {s}" for m, s in missing[:6]) + (", ..." if len(missing) > 6 else "")
        raise UsageError(f"the parts lack {len(missing)} run(s) of their grid: {shown}{hint}")
    grid = {"modes": modes, "seeds": seeds, "identity": first.grid["identity"]}
    hib = next((r.metric.get("higher_is_better", True) for _, rep in parts for r in rep.results
                if isinstance(r.metric, dict)), True)
    devices = list(dict.fromkeys(rep.device for _, rep in parts if rep.device))
    return build(records, grid, dataset=first.dataset, device=", ".join(devices), environment=first.environment,
                 higher_is_better=hib, chance=next((rep.chance for _, rep in parts if rep.chance), None),
                 interrupted=any(rep.interrupted for _, rep in parts),
                 note="; ".join(dict.fromkeys(rep.note for _, rep in parts if rep.note)) or None,
                 world_size=max((rep.world_size or 1 for _, rep in parts), default=1) if any(
                     rep.world_size for _, rep in parts) else None)


def _same_plans(parts) -> None:
    """Parts that ran a precision plan's mode ran the same plan (the grid's identity does not hold it):
    else one line naming the two parts."""
    seen: dict[str, tuple[str, dict]] = {}
    for path, rep in parts:
        for r in rep.results:
            if r.mode.startswith("plan:") and isinstance(r.plan, dict):
                key = {k: r.plan.get(k) for k in ("default", "modules")}
                first = seen.setdefault(r.mode, (_label(path, rep.shard), key))
                if first[1] != key:
                    raise UsageError(f"{_label(path, rep.shard)} ran another plan as {r.mode} than {first[0]} "
                                     f"({key} vs {first[1]}); merge parts of one plan")


def _missing_shards(parts, missing) -> str:
    """`` (shard 2/3 not given)`` when the missing runs are exactly some shards of a sharded part's grid."""
    for _, rep in parts:
        if not rep.shard:
            continue
        _, n = parse_shard(rep.shard)
        order = plan(rep.grid["modes"], rep.grid["seeds"])
        idx = {(m, s): k for k, (s, m) in enumerate(order)}
        if all(key in idx for key in missing):
            shards = sorted({idx[key] % n + 1 for key in missing})
            return f" (shard {', '.join(f'{i}/{n}' for i in shards)} not given, or interrupted)"
    return " (a part is missing, or was interrupted)"
