"""ampkit audit: per-layer numerics, the first inf/NaN, and what to do about it."""

from __future__ import annotations

import sys

from .common import add_device, add_framework, add_json, add_sizes, add_timeout

#: after Ctrl-C or SIGTERM, how long the audit may take to finish its current step and answer
STOP_GRACE_S = 60.0


def add_arguments(p) -> None:
    p.add_argument("--workload", default=None, metavar="NAME",
                   help="built-in workload (default: mlp on a CPU, resnet50 on a GPU)")
    p.add_argument("--model", default=None, metavar="MODULE:FACTORY", help="your own Workload or model factory")
    p.add_argument("--input-shape", default=None, metavar="D1,D2,...", help="per-sample input shape for a bare model")
    p.add_argument("--num-classes", type=int, default=None, metavar="N",
                   help="classes for a bare model (default: what a Keras model's output declares, else 10)")
    add_sizes(p)
    p.add_argument("--mode", default="fp16", metavar="fp16|bf16|auto",
                   help="the mode to audit (default fp16); auto: auto's choice when it is fp16 or bf16, else bf16")
    p.add_argument("--steps", type=int, default=1, metavar="N", help="training steps to audit (default 1)")
    p.add_argument("--loss-scale", type=float, default=None, metavar="S",
                   help="fixed loss scale to audit at (default: the engine's initial scale, 65536 for fp16)")
    p.add_argument("--batch-size", type=int, default=None, metavar="N", help="batch size (default: the workload's)")
    add_framework(p)
    add_device(p)
    add_json(p)
    add_timeout(p, "the audit")


def audit_in_child(framework: str, cfg, sizes: dict | None = None):
    """The whole audit, run by :func:`ampkit.isolation.run_isolated`: user code, an out-of-memory
    or a crash in it ends as one line, never as ampkit's death. ``sizes``: --seq-len/--image-size,
    handed to the built-in workload this process builds."""
    from ..backends import get_backend

    if sizes:
        _apply_sizes(framework, cfg, sizes)
    return get_backend(framework).audit(cfg)


def _apply_sizes(framework: str, cfg, sizes: dict) -> None:
    """Check --seq-len/--image-size against the workload that will run and set them as the default
    size of the built-in workloads in this (child) process."""
    from ..bench.sizes import size_kwargs

    if framework == "torch":
        from ..backends.torch.devices import resolve_device
        from ..backends.torch.workloads import DEFAULT_SIZES, check_builtin, default_workload

        name = None if cfg.model else check_builtin(cfg.workload or default_workload(resolve_device(cfg.device)))
    else:
        from ..backends.tensorflow.workloads import DEFAULT_SIZES, check_tf_workload

        name = None if cfg.model else check_tf_workload(cfg.workload or "mlp")
    DEFAULT_SIZES.clear()
    DEFAULT_SIZES.update(size_kwargs(framework, name, cfg.model, sizes.get("seq_len"), sizes.get("image_size")))


def run(args) -> int:
    from .. import signals
    from ..audit.core import AuditConfig
    from ..backends import get_backend, parse_framework
    from ..errors import UsageError
    from ..factory import parse_shape
    from ..isolation import PartialResult, run_isolated
    from ..precision import parse_mode
    from ..render import audit as render_audit
    from ..render.output import console, write_json
    from . import validate as v

    framework = parse_framework(args.framework)
    mode = parse_mode(args.mode)
    if mode not in ("fp16", "bf16", "auto"):
        raise UsageError(f"--mode must be fp16, bf16 or auto for an audit; received {args.mode!r}")
    v.int_in(args.steps, "--steps", 1, 10_000)
    v.int_in(args.batch_size, "--batch-size", 1, v.MAX_BATCH)
    v.int_in(args.num_classes, "--num-classes", 1, v.MAX_CLASSES)
    v.float_in(args.loss_scale, "--loss-scale", 0, v.MAX_LOSS_SCALE, lo_open=True)
    v.float_in(args.timeout, "--timeout", 0, v.MAX_TIMEOUT_S, lo_open=True)
    v.sizes(args)
    if args.workload and args.model:
        raise UsageError("give either --workload or --model, not both")
    v.outputs(args, ("json", "JSON", "--json", True))
    cfg = AuditConfig(workload=args.workload, model=args.model, input_shape=parse_shape(args.input_shape),
                      num_classes=args.num_classes, mode=mode, steps=args.steps, loss_scale=args.loss_scale,
                      batch_size=args.batch_size, device=args.device)
    v.input_shape(cfg.input_shape)
    con = console(json_to_stdout=args.json == "-")
    backend = get_backend(framework)  # a missing framework: one line here, not from the child
    try:
        sizes = {"seq_len": args.seq_len, "image_size": args.image_size}
        report = run_isolated(audit_in_child, backend.name, cfg, sizes if any(sizes.values()) else None,
                              timeout=args.timeout,
                              what=f"auditing {args.model or args.workload or 'the default workload'}",
                              keep_partial=STOP_GRACE_S)
    except PartialResult as stopped:  # Ctrl-C or SIGTERM: the steps that finished are kept
        signals.ignore_further()  # a second Ctrl-C must not cut the writing of what finished short
        report = stopped.result
        render_audit.render(report, con)
        if args.json:
            write_json(report.to_dict(), args.json)
        print(f"ampkit: {signals.describe()}: kept the {report.completed} audited step(s) that finished",
              file=sys.stderr)
        return signals.exit_code(stopped.cause)
    render_audit.render(report, con)
    if args.json:
        write_json(report.to_dict(), args.json)
    return 1 if report.failed else 0
