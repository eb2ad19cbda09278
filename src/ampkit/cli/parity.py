"""ampkit parity: does mixed precision converge like fp32 -- on real data, or on your model and data?"""

from __future__ import annotations

import contextlib

from .common import add_run_flags


def add_arguments(p) -> None:
    p.add_argument("--dataset", default=None, metavar="NAME", help="digits (default) or mnist5k")
    p.add_argument("--model", default=None, metavar="MODULE:FACTORY",
                   help="your model factory (a fresh torch.nn.Module / ampkit.Workload, or a keras.Model), with --data")
    p.add_argument("--data", default=None, metavar="MODULE:FACTORY",
                   help="your data factory returning (train, validation): torch Datasets/DataLoaders, "
                        "tf.data.Datasets or (inputs, targets) arrays")
    p.add_argument("--modes", default=None, metavar="LIST",
                   help="comma-separated modes; fp32 is the baseline (default: fp32 and every mode this device runs)")
    p.add_argument("--seeds", type=int, default=3, metavar="N", help="seeds per mode (default 3)")
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
    p.add_argument("--plot", default=None, metavar="PATH", help="write a PNG of the loss curves")


def run(args) -> int:
    from ..backends import parse_framework
    from ..errors import UsageError
    from ..parity.config import ParityConfig
    from ..parity.driver import run as run_parity
    from ..render import parity as render_parity
    from ..render.output import console
    from . import validate as v
    from .finish import finish

    framework = parse_framework(args.framework)
    if args.dataset is not None and (args.model or args.data):
        raise UsageError("--dataset names a built-in dataset; --model/--data train your own: give one or the other")
    cfg = ParityConfig(dataset=args.dataset or "digits", modes=args.modes, seeds=args.seeds, epochs=args.epochs,
                       tolerance=args.tolerance, device=args.device, margin=args.margin, steps=args.steps,
                       model=args.model, data=args.data, lr=args.lr, batch_size=args.batch_size,
                       plan=_plan(args.plan, framework))
    v.outputs(args, ("json", "JSON", "--json", True), ("plot", "plot", "--plot", False))
    con = console(json_to_stdout=args.json == "-")
    with _progress(steps=bool(args.steps)) as (progress, on_run):
        report = run_parity(cfg, framework, progress=progress, on_run=on_run)
    seeds = len(report.results[0].seeds) if report.results else 0
    return finish(report, args, con, render_parity.render,
                  writers={"plot": render_parity.plot} if report.results else {},
                  kept=f"the {seeds} seed(s) whose every mode finished")


def _plan(path, framework):
    from .bench import _plan as checked

    return checked(path, framework)


@contextlib.contextmanager
def _progress(steps: bool = False):
    """``(progress, on_run)`` for the driver, on stderr: on a terminal one bar of epochs (steps)
    per run, titled with the seed, the mode and the time left; in a log (CI) a plain line as each
    run starts and ends, with the estimate of the time left."""
    import sys

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from ..render.output import console

    err = console(json_to_stdout=True)
    unit = "steps" if steps else "epochs"
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} " + unit),
                  TimeElapsedColumn(), console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task("parity", total=None)
        state = {"title": "parity"}

        def progress(mode, seed, done, total):
            bar.update(task, description=state["title"], completed=done, total=total)

        def on_run(status):
            if err.is_terminal:
                eta = f", {status.left()}" if status.eta_s is not None else ""
                state["title"] = f"seed {status.seed_index}/{status.seeds} {status.mode} (run {status.run}/{status.runs}{eta})"
                bar.update(task, description=state["title"], completed=0)
            else:
                print(status.words(), file=sys.stderr, flush=True)
        yield progress, on_run
