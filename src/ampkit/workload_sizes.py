"""``--seq-len`` and ``--image-size``: the input size of the built-in workloads (bench and audit)."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import UsageError

SEQ_LEN, IMAGE_SIZE = "--seq-len", "--image-size"
MAX_SEQ_LEN = 1 << 16
MAX_IMAGE_SIZE = 8192


@dataclass(frozen=True)
class SizeRule:
    flag: str
    default: int
    minimum: int
    multiple_of: int = 1
    why: str = ""

    @property
    def keyword(self) -> str:
        return "seq_len" if self.flag == SEQ_LEN else "image_size"


#: framework -> built-in workload -> the size it takes
RULES: dict[str, dict[str, SizeRule]] = {
    "torch": {
        "cnn": SizeRule(IMAGE_SIZE, 32, 4, why="two 2x2 poolings"),
        "resnet50": SizeRule(IMAGE_SIZE, 224, 32, why="ResNet downsamples 32x"),
        "vit_b_16": SizeRule(IMAGE_SIZE, 224, 16, 16, why="16x16 patches"),
        "bert-base": SizeRule(SEQ_LEN, 128, 1),
        "gpt2": SizeRule(SEQ_LEN, 512, 2, why="a causal LM predicts the next token"),
    },
    "tensorflow": {
        "cnn": SizeRule(IMAGE_SIZE, 32, 4, why="two 2x2 poolings"),
        "resnet50": SizeRule(IMAGE_SIZE, 224, 32, why="keras.applications.ResNet50 needs at least 32"),
        "bert-base": SizeRule(SEQ_LEN, 128, 1),
    },
}


def _takers(rules: dict[str, SizeRule], flag: str) -> str:
    return ", ".join(name for name, r in rules.items() if r.flag == flag)


def check_flag_values(seq_len: int | None, image_size: int | None) -> None:
    """Bounds that hold for every workload (the CLI checks them before anything else)."""
    for flag, value, hi in ((SEQ_LEN, seq_len, MAX_SEQ_LEN), (IMAGE_SIZE, image_size, MAX_IMAGE_SIZE)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= hi):
            raise UsageError(f"{flag} must be >= 1 and at most {hi:,}; received {value}")


def size_kwargs(framework: str, workload: str | None, model: str | None, seq_len: int | None,
                image_size: int | None) -> dict:
    """The keyword (``seq_len=`` or ``image_size=``) the built-in ``workload`` is built with; {} when
    neither flag was given. UsageError when a given flag does not apply or its value does not fit."""
    if seq_len is None and image_size is None:
        return {}
    check_flag_values(seq_len, image_size)
    given = [f for f, v in ((SEQ_LEN, seq_len), (IMAGE_SIZE, image_size)) if v is not None]
    if model:
        raise UsageError(f"{' and '.join(given)} size the built-in workloads; a --model sets its own input shapes "
                         "(--input-shape for a bare model)")
    rules = RULES.get(framework, {})
    rule = rules.get(workload or "")
    if rule is None:
        takers = "; ".join(f"{flag}: {_takers(rules, flag)}" for flag in (SEQ_LEN, IMAGE_SIZE) if _takers(rules, flag))
        raise UsageError(f"workload {workload!r} ({framework}) takes neither --seq-len nor --image-size"
                         + (f"; {takers}" if takers else f"; no {framework} workload does"))
    wrong = [f for f in given if f != rule.flag]
    if wrong:
        raise UsageError(f"{wrong[0]} does not apply to workload {workload!r} ({framework}), which takes {rule.flag}; "
                         f"{wrong[0]} applies to: {_takers(rules, wrong[0]) or 'none'}")
    value = seq_len if rule.flag == SEQ_LEN else image_size
    why = f" ({rule.why})" if rule.why else ""
    if value < rule.minimum:
        raise UsageError(f"{rule.flag} for {workload} must be at least {rule.minimum}{why}; received {value}")
    if value % rule.multiple_of:
        raise UsageError(f"{rule.flag} for {workload} must be a multiple of {rule.multiple_of}{why}; received {value}")
    return {rule.keyword: value}
