"""ampkit plan: audit, propose, bench and check a precision plan per candidate mode; write the first
that is faster than fp32 and not worse (or say why none is)."""

from __future__ import annotations

from .common import add_run_flags, add_timeout


def add_arguments(p) -> None:
    p.add_argument("--model", default=None, metavar="MODULE:FACTORY", help="your own Workload or model factory")
    p.add_argument("--workload", default=None, metavar="NAME", help="a built-in workload instead of --model")
    p.add_argument("--data", default=None, metavar="MODULE:FACTORY",
                   help="(train, validation) for the short parity of each plan against fp32 (without it: not measured)")
    p.add_argument("--input-shape", default=None, metavar="D1,D2,...", help="per-sample input shape for a bare model")
    p.add_argument("--num-classes", type=int, default=None, metavar="N", help="classes for a bare model (default 10)")
    p.add_argument("--modes", default=None, metavar="LIST",
                   help="candidate modes, tried fastest first as measured here (default: fp8,bf16,fp16 where each runs)")
    p.add_argument("--budget", default=None, metavar="TIME",
                   help="stop trying further candidates after this long, e.g. 10m, 90s (default: no limit)")
    p.add_argument("--out", required=True, metavar="PATH", help="where to write the plan (JSON)")
    p.add_argument("--steps", type=int, default=20, metavar="N", help="timed bench steps per mode (default 20)")
    p.add_argument("--warmup", type=int, default=5, metavar="N", help="untimed bench warm-up steps (default 5)")
    p.add_argument("--seeds", type=int, default=3, metavar="N", help="parity seeds (default 3)")
    p.add_argument("--parity-steps", type=int, default=40, metavar="N", help="parity optimizer steps per run (default 40)")
    add_run_flags(p)
    add_timeout(p, "each audit, bench mode or parity child")


def run(args) -> int:
    from ..factory import parse_shape
    from ..plan.loop import PlanConfig, parse_budget, run_plan
    from ..plan.report import PlanReport
    from ..registry import parse_framework
    from ..render import plan as render_plan
    from ..render.output import console
    from . import validate as v
    from .finish import finish
    from .plan_out import use_line

    framework = parse_framework(args.framework)
    if framework == "tensorflow":  # its bench/parity --plan are PyTorch-only for now
        from ..errors import UsageError

        raise UsageError("ampkit plan is PyTorch-only for now; for Keras, ampkit audit --framework tensorflow "
                         "--plan PATH proposes a plan and ampkit.keras.MixedPrecision.from_plan(PATH) applies it")
    cfg = PlanConfig(model=args.model, workload=args.workload, data=args.data,
                     input_shape=parse_shape(args.input_shape), num_classes=args.num_classes,
                     modes=tuple(args.modes.split(",")) if args.modes else None, budget_s=parse_budget(args.budget),
                     device=args.device, steps=args.steps, warmup=args.warmup, seeds=args.seeds,
                     parity_steps=args.parity_steps, timeout=args.timeout)
    v.outputs(args, ("json", "JSON", "--json", True), ("out", "plan", "--out", False))
    con = console(json_to_stdout=args.json == "-")
    err = console(json_to_stdout=True)
    result = run_plan(cfg, framework, say=lambda text: err.print(f"[dim]plan: {text}[/]"))
    decided = not (result.interrupted and result.status == "not_measured")  # stopped first: no plan file
    written, lost = [], None
    if decided:  # a path the OS refuses (a full disk, /proc): one line and a fallback file, never a traceback
        from ..outputs import salvage

        lost = salvage(lambda p: (result.chosen.save(p), written.append(p)), args.out, "--out", "ampkit.plan")
    out = written[-1] if written else None
    report = PlanReport.from_run(result, args.model or args.workload, out, use_line(result.chosen, out) if out else None)
    rc = finish(report, args, con, render_plan.render, kept="the candidates tried so far (no plan written)"
                if not decided else "the plan decided before the stop")
    return rc or (1 if lost else 0)
