"""ampkit parity: does mixed precision converge like fp32 on real data?"""

from __future__ import annotations

import contextlib

from .common import add_run_flags


def add_arguments(p) -> None:
    p.add_argument("--dataset", default="digits", metavar="NAME", help="digits (default) or mnist5k")
    p.add_argument("--modes", default=None, metavar="LIST",
                   help="comma-separated modes; fp32 is the baseline (default: fp32 and every mode this device runs)")
    p.add_argument("--seeds", type=int, default=3, metavar="N", help="seeds per mode (default 3)")
    p.add_argument("--epochs", type=int, default=None, metavar="N", help="epochs per run (default: the dataset's)")
    p.add_argument("--tolerance", type=float, default=0.01, metavar="X",
                   help="how much lower accuracy than fp32 still counts as parity (absolute, default 0.01)")
    add_run_flags(p)
    p.add_argument("--plot", default=None, metavar="PATH", help="write a PNG of the loss curves")


def run(args) -> int:
    from ..backends import parse_framework
    from ..parity.config import ParityConfig
    from ..parity.driver import run as run_parity
    from ..render import parity as render_parity
    from ..render.output import console
    from . import validate as v
    from .finish import finish

    framework = parse_framework(args.framework)
    cfg = ParityConfig(dataset=args.dataset, modes=args.modes, seeds=args.seeds, epochs=args.epochs,
                       tolerance=args.tolerance, device=args.device)
    v.outputs(args, ("json", "JSON", "--json", True), ("plot", "plot", "--plot", False))
    con = console(json_to_stdout=args.json == "-")
    with _epoch_bar() as progress:
        report = run_parity(cfg, framework, progress=progress)
    seeds = len(report.results[0].seeds) if report.results else 0
    return finish(report, args, con, render_parity.render,
                  writers={"plot": render_parity.plot} if report.results else {},
                  kept=f"the {seeds} seed(s) whose every mode finished")


@contextlib.contextmanager
def _epoch_bar():
    """``progress(mode, seed, done, total)`` drawing one bar of epochs on stderr; a bar only on a
    terminal (in a log it would leave a blank line)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from ..render.output import console

    err = console(json_to_stdout=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} epochs"),
                  TimeElapsedColumn(), console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task("parity", total=None)
        state = {"runs": 0}

        def progress(mode, seed, done, total):
            if done == 1:
                state["runs"] += 1
            bar.update(task, description=f"run {state['runs']}: {mode} seed {seed}", completed=done, total=total)
        yield progress
