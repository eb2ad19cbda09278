"""ampkit audit: per-layer numerics, the first inf/NaN, and what to do about it."""

from __future__ import annotations

from .common import add_run_flags, add_sizes, add_timeout


def add_arguments(p) -> None:
    p.add_argument("--workload", default=None, metavar="NAME",
                   help="built-in workload (default: mlp on a CPU, resnet50 on a GPU)")
    p.add_argument("--model", default=None, metavar="MODULE:FACTORY", help="your own Workload or model factory")
    p.add_argument("--data", default=None, metavar="MODULE:FACTORY",
                   help="audit on your own batch: the first batch of what FACTORY returns (PyTorch: a Dataset, "
                        "DataLoader or (inputs, targets) tensors/arrays; Keras: (inputs, targets) arrays or a batched "
                        "tf.data.Dataset; or (train, validation) as for parity); a bare model's input shape is the data's")
    p.add_argument("--input-shape", default=None, metavar="D1,D2,...",
                   help="per-sample input shape for a bare model (not needed with --data; given, it must match the data)")
    p.add_argument("--num-classes", type=int, default=None, metavar="N",
                   help="classes for a bare model (default: what a Keras model's output declares, else 10)")
    add_sizes(p)
    p.add_argument("--mode", default=None, metavar="fp16|bf16|fp8|auto",
                   help="the mode to audit (default fp16); fp8: each Linear through torchao against bf16 and fp32 "
                        "(ampkit[fp8]); auto: auto's choice when it is fp16 or bf16, else bf16")
    p.add_argument("--steps", type=int, default=None, metavar="N",
                   help="training steps to audit (default 1; 3 with --what-if)")
    p.add_argument("--loss-scale", type=float, default=None, metavar="S",
                   help="fixed loss scale to audit at (default: the engine's initial scale, 65536 for fp16)")
    p.add_argument("--what-if", action="store_true",
                   help="run float32 only and predict, per module, whether fp16, bf16 and fp8 would work "
                        "(verdicts, the fp16 loss-scale range, the first module to overflow, fp8 scalings)")
    p.add_argument("--formats", default=None, metavar="fp16,bf16,fp8",
                   help="the formats --what-if predicts (default: all three)")
    p.add_argument("--compile", action="store_true",
                   help="PyTorch: also run the forward under torch.compile in the mode and name the modules whose "
                        "output compilation changes beyond the mode's own eager error")
    p.add_argument("--batch-size", type=int, default=None, metavar="N", help="batch size (default: the workload's)")
    p.add_argument("--plan", default=None, metavar="PATH",
                   help="write the precision plan the audit proposes: the smallest set of modules to keep in float32 "
                        "(fp8: out of fp8) that removes its findings (MixedPrecision.from_plan(PATH) applies it)")
    add_run_flags(p)
    add_timeout(p, "the audit")


def run(args) -> int:
    """parse -> :class:`~ampkit.audit.config.AuditConfig` -> :func:`ampkit.audit.driver.run` -> finish."""
    from ..audit import driver
    from ..audit.config import WHAT_IF_FORMATS, AuditConfig
    from ..errors import UsageError
    from ..factory import parse_shape
    from ..isolation import PartialResult
    from ..precision import parse_mode
    from ..registry import child_backend, parse_framework
    from ..render import audit as render_audit
    from ..render.output import console
    from . import validate as v
    from .finish import finish

    framework = parse_framework(args.framework)
    if args.formats is not None and not args.what_if:
        raise UsageError("--formats applies to --what-if only")
    if args.what_if and args.mode is not None:
        raise UsageError("--what-if runs float32 only and predicts every format; --mode does not apply (use --formats)")
    if framework == "tensorflow" and args.mode and parse_mode(args.mode) == "fp8":
        raise UsageError("audit --mode fp8 is PyTorch-only (torchao's float8 layers); for Keras use --mode fp16 or bf16, "
                         "or --what-if --formats fp8 for a prediction")
    if args.compile and framework == "tensorflow":
        raise UsageError("audit --compile is PyTorch-only")
    steps = args.steps if args.steps is not None else (3 if args.what_if else 1)
    cfg = AuditConfig(workload=args.workload, model=args.model, input_shape=parse_shape(args.input_shape),
                      num_classes=args.num_classes, mode=args.mode or "fp16", steps=steps, loss_scale=args.loss_scale,
                      batch_size=args.batch_size, device=args.device, seq_len=args.seq_len,
                      image_size=args.image_size, timeout=args.timeout, what_if=args.what_if,
                      formats=args.formats if args.formats is not None else WHAT_IF_FORMATS, compile=args.compile,
                      data=args.data)
    v.outputs(args, ("json", "JSON", "--json", True), ("plan", "plan", "--plan", False))
    con = console(json_to_stdout=args.json == "-")
    # the audit runs in a child, which resolves and imports the framework (a missing one is one line
    # here): this process never loads torch for it (2 s of CPU a run)
    backend = child_backend(framework)
    cause = None
    try:
        report = driver.run(cfg, backend, progress=True)  # a line per pass on stderr (a long audit in a log)
    except PartialResult as stopped:  # Ctrl-C or SIGTERM: the steps that finished are kept
        report, cause = stopped.result, stopped.cause
    from .plan_out import write_proposed  # --plan: ampkit.plan.propose, over whatever modules the audit names

    def plan(rep, path):
        if rep.completed:
            write_proposed(rep, path, framework, cfg.formats if cfg.what_if else None, con)

    return finish(report, args, con, render_audit.render, kept=f"the {report.completed} audited step(s) that finished",
                  cause=cause, writers={"plan": plan})
