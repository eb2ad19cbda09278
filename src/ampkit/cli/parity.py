"""ampkit parity: does mixed precision converge like fp32 on real data?"""

from __future__ import annotations

from .common import add_device, add_framework, add_json


def add_arguments(p) -> None:
    p.add_argument("--dataset", default="digits", metavar="NAME", help="digits (default) or mnist5k")
    p.add_argument("--modes", default=None, metavar="LIST",
                   help="comma-separated modes; fp32 is the baseline (default: fp32 and every mode this device runs)")
    p.add_argument("--seeds", type=int, default=3, metavar="N", help="seeds per mode (default 3)")
    p.add_argument("--epochs", type=int, default=None, metavar="N", help="epochs per run (default: the dataset's)")
    p.add_argument("--tolerance", type=float, default=0.01, metavar="X",
                   help="how much lower accuracy than fp32 still counts as parity (absolute, default 0.01)")
    add_framework(p)
    add_device(p)
    add_json(p)
    p.add_argument("--plot", default=None, metavar="PATH", help="write a PNG of the loss curves")


def run(args) -> int:
    import sys

    from .. import signals
    from ..backends import get_backend, parse_framework
    from ..parity.core import ParityConfig
    from ..parity.datasets import check_dataset
    from ..precision import parse_mode_list
    from ..render import parity as render_parity
    from ..render.output import console, write_json
    from . import validate as v

    framework = parse_framework(args.framework)
    check_dataset(args.dataset)
    v.int_in(args.seeds, "--seeds", 1, v.MAX_SEEDS)
    v.int_in(args.epochs, "--epochs", 1, v.MAX_EPOCHS)
    v.float_in(args.tolerance, "--tolerance", 0, 1)
    modes = parse_mode_list(args.modes, allow_auto=True) if args.modes is not None else None
    cfg = ParityConfig(dataset=args.dataset, modes=modes, seeds=args.seeds, epochs=args.epochs,
                       tolerance=args.tolerance, device=args.device).validate()
    v.outputs(args, ("json", "JSON", "--json", True), ("plot", "plot", "--plot", False))
    backend = get_backend(framework)
    con = console(json_to_stdout=args.json == "-")

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    err = console(json_to_stdout=True)  # a bar only on a terminal: in a log it would leave a blank line
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} epochs"),
                  TimeElapsedColumn(), console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task("parity", total=None)
        state = {"runs": 0}

        def progress(mode, seed, done, total):
            if done == 1:
                state["runs"] += 1
            bar.update(task, description=f"run {state['runs']}: {mode} seed {seed}", completed=done, total=total)

        report = backend.parity(cfg, progress=progress)
    if report.interrupted:
        signals.ignore_further()  # a second Ctrl-C must not cut the writing of what finished short
    render_parity.render(report, con)
    if args.json:
        write_json(report.to_dict(), args.json)
    if args.plot and report.results:
        render_parity.plot(report, args.plot)
    if report.interrupted:
        seeds = len(report.results[0].seeds) if report.results else 0
        print(f"ampkit: {signals.describe()}: kept the {seeds} seed(s) whose every mode finished", file=sys.stderr)
        return signals.exit_code()
    return 1 if report.failed else 0
