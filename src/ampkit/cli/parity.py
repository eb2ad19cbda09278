"""ampkit parity: does mixed precision converge like fp32 -- on real data, or on your model and data?"""

from __future__ import annotations

import contextlib

from .common import add_run_flags, add_timeout


def add_arguments(p) -> None:
    p.add_argument("--dataset", default=None, metavar="NAME", help="digits (default) or mnist5k")
    p.add_argument("--model", default=None, metavar="MODULE:FACTORY",
                   help="your model factory (a fresh torch.nn.Module / ampkit.Workload, or a keras.Model), with --data")
    p.add_argument("--data", default=None, metavar="MODULE:FACTORY",
                   help="your data factory returning (train, validation): torch Datasets/DataLoaders, "
                        "tf.data.Datasets or (inputs, targets) arrays")
    p.add_argument("--modes", default=None, metavar="LIST",
                   help="comma-separated modes; fp32 is the baseline (default: fp32 and every mode this device runs)")
    p.add_argument("--seeds", type=int, default=None, metavar="N",
                   help="seeds per mode (default 3; with --resume, the document's)")
    p.add_argument("--epochs", type=int, default=None, metavar="N",
                   help="epochs per run (default: the dataset's; 3 with --data)")
    p.add_argument("--steps", type=int, default=None, metavar="N",
                   help="optimizer steps per run instead of --epochs (for large data)")
    p.add_argument("--lr", type=float, default=None, metavar="X", help="AdamW learning rate with --data (default 1e-3)")
    p.add_argument("--batch-size", type=int, default=None, metavar="N",
                   help="batch size with --data for Datasets and arrays (default 64; a DataLoader keeps its own)")
    p.add_argument("--tolerance", type=float, default=0.01, metavar="X",
                   help="how much lower accuracy than fp32 still counts as parity (absolute, default 0.01)")
    p.add_argument("--margin", type=float, default=None, metavar="X",
                   help="equivalence margin (+-X in the metric's units) of the TOST verdict (default: --tolerance)")
    p.add_argument("--plan", default=None, metavar="PATH",
                   help="also train this precision plan (ampkit audit --plan / ampkit plan) as the mode plan:<default>")
    add_run_flags(p)
    add_timeout(p, "the check of the --model/--data factories (in a child process), and each run,")
    p.add_argument("--plot", default=None, metavar="PATH", help="write a PNG of the loss curves")
    p.add_argument("--shard", default=None, metavar="I/N",
                   help="run the I-th of N shares of the seeds x modes grid and write a partial document "
                        "(--json; one per share, e.g. a Slurm array task each), then --merge the parts")
    p.add_argument("--merge", nargs="+", default=None, metavar="PART.json",
                   help="combine partial documents of one grid (shards, a resumed document and more seeds) "
                        "into one document with the verdicts")
    p.add_argument("--runs", nargs="+", default=None, metavar="RUN.json",
                   help="compare your own training runs (documents of mp.record(path, seed=...)): grouped by mode, "
                        "paired by seed against fp32, parity's statistics; one run per mode: side by side, no verdict")
    p.add_argument("--resume", default=None, metavar="PATH",
                   help="grow the grid of the document PATH: add --seeds/--modes, run only the runs it lacks "
                        "(or that raised), recompute the verdicts over all; written back to PATH unless --json")


def run(args) -> int:
    import os

    from ..errors import UsageError
    from ..parity import grid
    from ..parity.config import ParityConfig
    from ..parity.driver import run as run_parity
    from ..registry import parse_framework
    from ..render import parity as render_parity
    from ..render.output import console
    from . import validate as v
    from .finish import finish

    if args.merge:
        return _merge(args)
    if args.runs:
        from .parity_runs import run_runs

        return run_runs(args)
    framework = parse_framework(args.framework)
    v.distributed_env("torch")  # the launcher's variables; the driver refuses a group for TensorFlow itself
    if args.dataset is not None and (args.model or args.data):
        raise UsageError("--dataset names a built-in dataset; --model/--data train your own: give one or the other")
    shard = grid.parse_shard(args.shard) if args.shard is not None else None
    if shard and not args.json:
        raise UsageError(f"--shard {args.shard} writes a partial document: give --json PATH "
                         f"(one per share, e.g. --json part-{shard[0]}-of-{shard[1]}.json)")
    if shard and int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
        raise UsageError("--shard and torchrun both split the grid: use one (each torchrun job may run the whole grid)")
    resume, modes, seeds, plan = None, args.modes, args.seeds, None
    if args.resume is not None:
        doc = grid.read(args.resume)
        resume = (args.resume, doc)
        _from_identity(args, doc.grid["identity"])
        modes = modes if modes is not None else ",".join(m for m in doc.grid["modes"] if not m.startswith("plan:"))
        plan = _held_plan(args, doc)
        seeds = seeds if seeds is not None else tuple(doc.grid["seeds"])
        if not args.json and not shard:
            args.json = args.resume  # the grown document replaces the one it grew from
    cfg = ParityConfig(dataset=args.dataset or "digits", modes=modes, seeds=3 if seeds is None else seeds,
                       epochs=args.epochs, tolerance=args.tolerance, device=args.device, margin=args.margin,
                       steps=args.steps, model=args.model, data=args.data, lr=args.lr, batch_size=args.batch_size,
                       timeout=args.timeout, plan=plan if plan is not None else _plan(args.plan, framework))
    v.outputs(args, ("json", "JSON", "--json", True), ("plot", "plot", "--plot", False))
    con = console(json_to_stdout=args.json == "-")
    lines = int(os.environ.get("WORLD_SIZE", "1") or 1) > 1  # one bar per rank would garble: plain lines

    def say(text: str) -> None:
        import sys

        print(f"parity: {text}", file=sys.stderr, flush=True)

    with _progress(steps=bool(args.steps), lines=lines) as (progress, on_run):
        report = run_parity(cfg, framework, progress=progress, on_run=on_run, shard=shard, resume=resume, say=say)
    if report is None:  # another rank than 0 under torchrun: rank 0 writes the document
        return 0
    seeds = len(report.results[0].seeds) if report.results else 0
    kept = ("the runs that finished" if shard or resume or report.world_size
            else f"the {seeds} seed(s) whose every mode finished")
    if report.unpaired_runs:  # an unfinished seed's finished runs: in the document, for --resume
        where = args.json if args.json not in (None, "-") else "PATH"
        kept += (f", and {len(report.unpaired_runs)} run(s) of an unfinished seed (--resume {where} runs only "
                 "the rest)")
    return finish(report, args, con, render_parity.render,
                  writers={"plot": render_parity.plot} if report.results else {}, kept=kept)


def _merge(args) -> int:
    """``--merge PART.json ...``: one document of the parts' grid, with its verdicts."""
    from ..errors import UsageError
    from ..outputs import check_output
    from ..parity import grid
    from ..render import parity as render_parity
    from ..render.output import console
    from . import validate as v
    from .finish import finish

    given = [flag for flag, value in (("--dataset", args.dataset), ("--model", args.model), ("--data", args.data),
                                      ("--modes", args.modes), ("--seeds", args.seeds), ("--epochs", args.epochs),
                                      ("--steps", args.steps), ("--shard", args.shard), ("--resume", args.resume))
             if value is not None]
    if given:
        raise UsageError(f"--merge combines documents as they were run; {', '.join(given)} belong(s) to a run, "
                         "not to a merge")
    v.outputs(args, ("json", "JSON", "--json", True), ("plot", "plot", "--plot", False))
    check_output(args.json, "JSON", "--json", inputs=args.merge)
    report = grid.merge(list(args.merge))
    con = console(json_to_stdout=args.json == "-")
    return finish(report, args, con, render_parity.render,
                  writers={"plot": render_parity.plot} if report.results else {}, kept="the runs the parts hold")


def _from_identity(args, ident: dict) -> None:
    """``--resume PATH`` alone: what to train comes from the document's grid (its dataset or
    factories, steps or epochs, and a user's data's lr and batch size) where the flags do not say;
    a flag given and different is still refused as another grid (ampkit.parity.grid.same_grid)."""
    if args.dataset is None and args.model is None and args.data is None:
        if isinstance(ident.get("data"), str) and isinstance(ident.get("model"), str):
            args.model, args.data = ident["model"], ident["data"]
            for flag in ("lr", "batch_size"):
                if getattr(args, flag) is None and ident.get(flag) is not None:
                    setattr(args, flag, ident[flag])
        elif isinstance(ident.get("dataset"), str):
            args.dataset = ident["dataset"]
    if args.steps is None and args.epochs is None:
        args.steps, args.epochs = ident.get("steps"), ident.get("epochs")


def _held_plan(args, doc):
    """``--resume`` of a document with a plan's mode (``plan:<default>``) and no ``--plan``: the plan
    its results carry (the runs to add train the same plan), or one line asking for it."""
    from ..errors import UsageError

    if not any(m.startswith("plan:") for m in doc.grid["modes"]):
        return None
    held = next((r.plan for r in doc.results if r.mode.startswith("plan:") and isinstance(r.plan, dict)), None)
    if args.plan is not None:  # the same plan, or its runs would mix with another's under one label
        from ..plan_format import load_plan

        given = load_plan(args.plan).to_dict()
        if held is not None and [given.get(k) for k in ("default", "modules")] != [held.get(k) for k in
                                                                                ("default", "modules")]:
            raise UsageError(f"--plan {args.plan} is not the plan {args.resume} was run with (default "
                             f"{held.get('default')}, modules {held.get('modules')}); give that plan, or start a new "
                             "document")
        return None
    if held is None:
        raise UsageError(f"{args.resume} compares a precision plan ({', '.join(m for m in doc.grid['modes'] if m.startswith('plan:'))}) "
                         "but holds no copy of it: give the same --plan PATH to resume it")
    return held


def _plan(path, framework):
    from .bench import _plan as checked

    return checked(path, framework)


@contextlib.contextmanager
def _progress(steps: bool = False, lines: bool = False):
    """``(progress, on_run)`` for the driver, on stderr: on a terminal one bar of epochs (steps)
    per run, titled with the seed, the mode and the time left; in a log (CI) a plain line as each
    run starts and ends, with the estimate of the time left."""
    import sys

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from ..render.output import console

    err = console(json_to_stdout=True)
    unit = "steps" if steps else "epochs"
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} " + unit),
                  TimeElapsedColumn(), console=err, transient=True, disable=lines or not err.is_terminal) as bar:
        task = bar.add_task("parity", total=None)
        state = {"title": "parity"}

        def progress(mode, seed, done, total):
            bar.update(task, description=state["title"], completed=done, total=total)

        def on_run(status):
            if err.is_terminal and not lines:
                eta = f", {status.left()}" if status.eta_s is not None else ""
                state["title"] = f"seed {status.seed_index}/{status.seeds} {status.mode} (run {status.run}/{status.runs}{eta})"
                bar.update(task, description=state["title"], completed=0)
            else:
                print(status.words(), file=sys.stderr, flush=True)
        yield progress, on_run
