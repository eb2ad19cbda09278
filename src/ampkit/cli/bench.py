"""ampkit bench: training steps side by side in every mode."""

from __future__ import annotations

from .common import ProgressLines, add_run_flags, add_sizes, add_threads, add_timeout


def add_arguments(p) -> None:
    p.add_argument("--workload", default=None, metavar="NAME",
                   help="mlp, cnn, resnet50, vit_b_16, bert-base, gpt2 (default: mlp on a CPU, resnet50 on a GPU)")
    p.add_argument("--model", default=None, metavar="MODULE:FACTORY",
                   help="your own model: a zero-argument factory returning an ampkit.Workload or a torch.nn.Module "
                        "(MODULE:FACTORY or PATH/TO/FILE.py:FACTORY)")
    p.add_argument("--data", default=None, metavar="MODULE:FACTORY",
                   help="time a real batch of your data (PyTorch): a factory returning a Dataset, a DataLoader, "
                        "(inputs, targets) tensors or parity's (train, validation); no --input-shape needed")
    p.add_argument("--input-shape", default=None, metavar="D1,D2,...",
                   help="per-sample input shape for a bare model, without the batch dimension")
    p.add_argument("--num-classes", type=int, default=None, metavar="N",
                   help="classes for a bare model (default: what a Keras model's output declares, else 10)")
    add_sizes(p)
    p.add_argument("--modes", default="all", metavar="LIST",
                   help="comma-separated modes (auto: the mode auto picks for the device; fp8: through torchao, "
                        "emulated without fp8 hardware) or 'all', fp8 included where torchao is installed (default: all)")
    p.add_argument("--batch-size", default=None, metavar="N|auto",
                   help="per-step batch size, or 'auto' for the largest that fits (default: the workload's)")
    p.add_argument("--memory-budget", default=None, metavar="SIZE",
                   help="the largest batch whose measured peak stays within SIZE, e.g. 8GiB (implies --batch-size auto)")
    p.add_argument("--max-batch-size", type=int, default=1 << 16, metavar="N",
                   help="the largest batch --batch-size auto tries (default 65536)")
    p.add_argument("--steps", type=int, default=20, metavar="N", help="timed steps per mode (default 20)")
    p.add_argument("--warmup", type=int, default=5, metavar="N", help="untimed warm-up steps (default 5)")
    p.add_argument("--repeats", type=int, default=1, metavar="N",
                   help="run the mode sequence N times, interleaved; rows report medians and a speedup interval (default 1)")
    p.add_argument("--explain", action="store_true",
                   help="profile a few more steps per mode: each row gains a breakdown of its step by category "
                        "and sentences on why it is faster or slower than fp32")
    p.add_argument("--strategy", default=None, choices=["mirrored"],
                   help="Keras only: train under tf.distribute.MirroredStrategy (all local GPUs); "
                        "--batch-size is then the global batch")
    p.add_argument("--replicas", type=int, default=None, metavar="N",
                   help="with --strategy on a CPU: N logical CPU devices, for testing a strategy without GPUs")
    p.add_argument("--compile", default="off", choices=["off", "on", "both"],
                   help="torch.compile the model (Keras: jit_compile=True) in every mode; 'both' runs eager and "
                        "compiled side by side; rows gain compile_s, graph_breaks, recompiles (default: off)")
    p.add_argument("--plan", default=None, metavar="PATH",
                   help="also run this precision plan (ampkit audit --plan / ampkit plan) as the mode plan:<default>")
    add_threads(p)
    add_run_flags(p)
    p.add_argument("--csv", default=None, metavar="PATH", help="write the rows as CSV")
    p.add_argument("--plot", default=None, metavar="PATH", help="write a PNG of throughput and peak memory")
    add_timeout(p, "a mode (or the probe of a --model) that has not finished")


def _batch_size(text):
    """N or auto (the range is the config's to check)."""
    from ..errors import UsageError

    if text is None or str(text).strip().lower() == "auto":
        return text if text is None else "auto"
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"--batch-size must be a positive integer or 'auto'; received {text!r}") from None


def _plan(path, framework):
    """--plan PATH: the checked plan (the framework's, when one was named), as a dict for the config."""
    if path is None:
        return None
    from ..errors import UsageError
    from ..plan_format import load_plan

    plan = load_plan(path, framework if framework in ("torch", "tensorflow") else None)
    if framework == "tensorflow" or plan.framework == "tensorflow":  # not yet: the Keras bench/parity run modes only
        raise UsageError(f"--plan {path}: running a plan as a mode is PyTorch-only for now; a Keras plan applies "
                         "with ampkit.keras.MixedPrecision.from_plan(path) and mp.prepare(model)")
    return plan.to_dict()


def run(args) -> int:
    import os

    from ..bench import driver
    from ..bench.config import BenchConfig
    from ..factory import check_findable, parse_shape
    from ..registry import get_backend, parse_framework
    from ..render import bench as render_bench
    from ..render.output import console
    from . import validate as v
    from .finish import finish

    framework = parse_framework(args.framework)
    v.distributed_env(framework)
    cfg = BenchConfig(
        workload=args.workload, model=args.model, input_shape=parse_shape(args.input_shape),
        num_classes=args.num_classes, modes=args.modes, batch_size=_batch_size(args.batch_size),
        memory_budget=args.memory_budget, steps=args.steps, warmup=args.warmup, device=args.device,
        search_cap=args.max_batch_size, timeout=args.timeout, repeats=args.repeats, seq_len=args.seq_len,
        image_size=args.image_size, explain=args.explain, strategy=args.strategy, replicas=args.replicas,
        compile=args.compile, plan=_plan(args.plan, framework), threads=args.threads, data=args.data)
    v.outputs(args, ("json", "JSON", "--json", True), ("csv", "CSV", "--csv", True), ("plot", "plot", "--plot", False))
    if framework in ("auto", "torch", "tensorflow"):  # a registered backend may refuse --model itself, first
        check_findable(cfg.model, "--model")  # a mistyped module: one line before the framework loads (issue #49)
    backend = get_backend(framework)
    con = console(json_to_stdout="-" in (args.json, args.csv))
    rank0 = int(os.environ.get("RANK", "0")) == 0

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    err = console(json_to_stdout=True)  # a bar only on a terminal: in a log it would leave a blank line
    # not a terminal (a log, a pipe, CI): plain progress lines on stderr instead -- never on stdout
    lines = ProgressLines("bench", cfg.warmup) if rank0 and not err.is_terminal else None
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=err, transient=True, disable=not rank0 or not err.is_terminal) as bar:
        tasks = {}

        def progress(msg: dict) -> None:
            if lines:
                lines(msg)
            mode = msg["mode"]
            if mode not in tasks:
                tasks[mode] = bar.add_task(f"{mode}", total=None)
            if msg.get("kind") == "start":
                bar.update(tasks[mode], description=f"{mode}: starting", completed=0, total=None, visible=True)
            elif msg.get("kind") == "search":
                bar.update(tasks[mode], description=f"{mode}: trying batch {msg['done']}")
            else:
                bar.update(tasks[mode], description=f"{mode}: training", completed=msg["done"], total=msg["total"])

        def on_row(row) -> None:
            if row.mode in tasks:
                bar.update(tasks[row.mode], visible=False)
            con.print(f"[dim]{row.mode}: {row.status}[/]")

        report = driver.run(cfg, backend, progress=progress, on_row=on_row)
    if not rank0:
        return 0
    return finish(report, args, con, render_bench.render, writers={"csv": render_bench.to_csv, "plot": render_bench.plot},
                  kept=f"the {len(report.results)} mode(s) that finished")
