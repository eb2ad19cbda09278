"""``ampkit parity --runs RUN.json...``: your own runs compared (:mod:`ampkit.parity.runs`)."""

from __future__ import annotations


def run_runs(args) -> int:
    from ..errors import UsageError
    from ..outputs import check_output
    from ..parity.runs import compare_runs
    from ..render import parity as render_parity
    from ..render.output import console
    from . import validate as v
    from .finish import finish

    given = [flag for flag, value in (("--dataset", args.dataset), ("--model", args.model), ("--data", args.data),
                                      ("--modes", args.modes), ("--seeds", args.seeds), ("--epochs", args.epochs),
                                      ("--steps", args.steps), ("--shard", args.shard), ("--resume", args.resume),
                                      ("--merge", args.merge)) if value is not None]
    if given:
        raise UsageError(f"--runs compares runs that already happened; {', '.join(given)} belong(s) to a parity run")
    v.outputs(args, ("json", "JSON", "--json", True), ("plot", "plot", "--plot", False))
    check_output(args.json, "JSON", "--json", inputs=args.runs)
    report = compare_runs(list(args.runs), args.tolerance, args.margin)
    con = console(json_to_stdout=args.json == "-")
    for r in report.results:
        if r.step_time:
            ci = r.step_time["ci"]
            con.print(f"{r.mode}: step time {r.step_time['speedup_vs_fp32']:.2f}x fp32's"
                      + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "") + f" over {r.step_time['steps']} paired steps",
                      markup=False, highlight=False)
    return finish(report, args, con, render_parity.render, writers={"plot": render_parity.plot}, kept="the runs")
