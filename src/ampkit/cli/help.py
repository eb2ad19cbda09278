"""``ampkit COMMAND --help``: the flags in groups and examples to copy, for every command."""

from __future__ import annotations

import argparse
import textwrap

#: command -> [(group title, flags)], in the order --help shows them
GROUPS: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "doctor": [
        ("what to check", ("--quick", "--thorough", "--threads")),
        ("where", ("--framework", "--device")),
        ("output", ("--json",)),
    ],
    "bench": [
        ("what to train", ("--workload", "--model", "--data", "--input-shape", "--num-classes", "--seq-len",
                           "--image-size", "--plan")),
        ("modes and batch", ("--modes", "--batch-size", "--memory-budget", "--max-batch-size", "--compile")),
        ("timing", ("--steps", "--warmup", "--repeats", "--explain", "--threads", "--timeout")),
        ("where", ("--framework", "--device", "--strategy", "--replicas")),
        ("output", ("--json", "--csv", "--plot")),
    ],
    "parity": [
        ("what to train", ("--dataset", "--model", "--data", "--plan")),
        ("the comparison", ("--modes", "--seeds", "--epochs", "--steps", "--lr", "--batch-size", "--tolerance",
                            "--margin")),
        ("your own runs", ("--runs",)),
        ("spread, resume and merge", ("--shard", "--merge", "--resume", "--timeout")),
        ("where", ("--framework", "--device")),
        ("output", ("--json", "--plot")),
    ],
    "audit": [
        ("what to audit", ("--workload", "--model", "--data", "--input-shape", "--num-classes", "--seq-len",
                           "--image-size", "--batch-size")),
        ("how", ("--mode", "--steps", "--loss-scale", "--what-if", "--formats", "--compile", "--plan", "--timeout")),
        ("where", ("--framework", "--device")),
        ("output", ("--json",)),
    ],
    "plan": [
        ("what to plan for", ("--model", "--workload", "--data", "--input-shape", "--num-classes")),
        ("the search", ("--modes", "--budget", "--steps", "--warmup", "--seeds", "--parity-steps", "--timeout")),
        ("where", ("--framework", "--device")),
        ("output", ("--out", "--json")),
    ],
    "report": [
        ("output", ("--html", "--markdown", "--plots")),
    ],
}

#: command -> example lines (a comment after '#' says what each does)
EXAMPLES: dict[str, tuple[str, ...]] = {
    "doctor": (
        "ampkit doctor                                  # what this machine supports, what works, what is faster",
        "ampkit doctor --quick                          # capability and self-tests only, no timing",
        "ampkit doctor --framework all --json doctor.json",
    ),
    "bench": (
        "ampkit bench --workload resnet50 --modes fp32,bf16,fp16",
        "ampkit bench --model mymodel:build --data mymodel:data --modes fp32,bf16 --steps 10",
        "ampkit bench --model ./elsewhere/train.py:Net --input-shape 3,32,32   # a file from anywhere",
        "ampkit bench --batch-size auto --memory-budget 8GiB --json bench.json --plot bench.png",
    ),
    "parity": (
        "ampkit parity --dataset digits --modes fp32,bf16 --seeds 5",
        "ampkit parity --model mymodel:build --data mymodel:data --modes fp32,bf16 --seeds 3 --steps 50",
        "ampkit parity ... --shard 2/3 --json part-2.json; ampkit parity --merge part-*.json --json parity.json",
        "ampkit parity ... --seeds 8 --resume parity.json   # grow a document instead of starting over",
        "ampkit parity --runs runs/*.json --json parity.json   # your own runs (mp.record), compared by mode",
    ),
    "audit": (
        "ampkit audit --workload bert-base --seq-len 64 --mode fp16",
        "ampkit audit --model mymodel:build --data mymodel:data --mode fp16 --json audit.json",
        "ampkit audit --model mymodel:build --input-shape 64 --what-if   # would fp16/bf16/fp8 work? (fp32 only)",
        "ampkit audit --model mymodel:build --input-shape 64 --mode fp16 --plan plan.json",
    ),
    "plan": (
        "ampkit plan --model mymodel:build --data mymodel:data --out plan.json",
        "ampkit plan --workload cnn --modes bf16,fp16 --budget 10m --out plan.json --json plan-report.json",
    ),
}

FACTORY_NOTE = ("MODULE:FACTORY imports MODULE with the current folder on the import path; PATH/TO/FILE.py:FACTORY "
                "takes a file from anywhere. Keep a file's own training under `if __name__ == \"__main__\":`.")


def arrange(name: str, parser: argparse.ArgumentParser) -> None:
    """Group ``parser``'s flags as :data:`GROUPS` says and add :data:`EXAMPLES` to its epilog."""
    groups = GROUPS.get(name)
    if groups:
        by_flag = {s: a for a in parser._actions for s in a.option_strings}
        moved = set()
        for title, flags in groups:
            actions = [by_flag[f] for f in flags if f in by_flag and id(by_flag[f]) not in moved]
            if not actions:
                continue
            group = parser.add_argument_group(title)
            for action in actions:
                for container in parser._action_groups:
                    if action in container._group_actions and container is not group:
                        container._group_actions.remove(action)
                group._group_actions.append(action)
                moved.add(id(action))
        parser._optionals.title = "other options"
        parser._action_groups.remove(parser._optionals)  # -h (and any flag no group names) last
        parser._action_groups.append(parser._optionals)
    examples = EXAMPLES.get(name)
    if examples:
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        text = "examples:\n" + "\n".join(f"  {line}" for line in examples)
        if name in ("bench", "parity", "audit", "plan"):
            text += "\n\n" + textwrap.fill(FACTORY_NOTE, 100)
        parser.epilog = f"{parser.epilog}\n\n{text}" if parser.epilog else text
