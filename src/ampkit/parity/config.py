"""What a parity run is asked to do, checked once, when it is made."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..checks import MAX_BATCH, MAX_EPOCHS, MAX_SEEDS, MAX_STEPS, MAX_TIMEOUT_S, float_in, int_in
from ..errors import UsageError
from ..isolation import DEFAULT_TIMEOUT_S
from ..precision import parse_mode, parse_mode_list


@dataclass(frozen=True)
class ParityConfig:
    """``ampkit parity``'s flags and ``ampkit.parity``'s keywords, validated at construction (each
    message names the CLI flag, so the library says the same). What the run decides -- the modes
    ``auto`` and the device gave, the epochs a dataset defaults to -- comes back in the report.

    ``dataset``: a built-in dataset's name (checked when it is loaded), or the name a caller's own
    data shows under. ``modes``: canonical modes, ``auto`` kept for the driver to resolve; None for
    every mode the device runs. ``seeds``: how many (0, 1, ...) or which. ``epochs``: None for the
    dataset's default. ``tolerance``: how much lower accuracy than fp32 (absolute) is still parity.
    """

    dataset: str = "digits"
    modes: tuple[str, ...] | None = None
    seeds: int | tuple[int, ...] = 3
    epochs: int | None = None
    tolerance: float = 0.01
    device: str = "auto"
    margin: float | None = None
    steps: int | None = None
    model: str | None = None
    data: str | None = None
    lr: float | None = None          # with --model/--data (None: 1e-3)
    batch_size: int | None = None    # with --model/--data, for Datasets and arrays (None: 64; a DataLoader keeps its own)
    timeout: float | None = DEFAULT_TIMEOUT_S  # seconds for checking the factories and for each run (None: no limit)
    plan: dict | None = None         # --plan PATH: a precision plan, compared as one more mode "plan:<default>"

    def __post_init__(self):
        if self.plan is not None:
            from ..plan_format import load_plan

            object.__setattr__(self, "plan", load_plan(self.plan).to_dict())
        if self.modes is not None:
            if not isinstance(self.modes, (str, list, tuple)):
                raise UsageError(f"modes must be a comma string or a list of modes; received {type(self.modes).__name__}")
            modes = (parse_mode_list(self.modes, allow_auto=True) if isinstance(self.modes, str)
                     else [parse_mode(m, allow_auto=True) for m in self.modes])
            if not modes:  # as the CLI's --modes "": an empty list would compare fp32 with nothing
                raise UsageError("no modes given; choose from: fp32, tf32, fp16, bf16, fp8, auto")
            object.__setattr__(self, "modes", tuple(dict.fromkeys(modes)))  # normalised once, still frozen after
        if isinstance(self.seeds, int):
            int_in(self.seeds, "--seeds", 1, MAX_SEEDS)
        else:
            seeds = tuple(self.seeds) if isinstance(self.seeds, (list, tuple, range)) else None
            bad = [s for s in seeds or () if not _whole(s)]
            if seeds is None or bad:
                raise UsageError(f"seeds must be a number of seeds or a list of distinct whole numbers >= 0; received "
                                 f"{self.seeds!r}" + (f" ({bad[0]!r} is not one)" if bad else ""))
            seeds = tuple(int(s) for s in seeds)
            if not seeds:
                raise UsageError("--seeds must be >= 1; received an empty list of seeds")
            if len(set(seeds)) != len(seeds):  # a seed run twice is the same run: no extra evidence
                raise UsageError(f"seeds must be distinct (a repeated seed repeats the same run and would count as "
                                 f"independent evidence in the t-test); received {list(seeds)}")
            int_in(len(seeds), "--seeds", 1, MAX_SEEDS)
            object.__setattr__(self, "seeds", seeds)
        int_in(self.epochs, "--epochs", 1, MAX_EPOCHS)
        float_in(self.timeout, "--timeout", 0, MAX_TIMEOUT_S, lo_open=True)
        tol = self.tolerance
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not (math.isfinite(tol) and 0 <= tol < 1):
            # one rule for the CLI and the library: 1 would pass a mode that learned nothing
            raise UsageError(f"--tolerance is an absolute accuracy in [0, 1); received {tol}")
        m = self.margin
        if m is not None and (isinstance(m, bool) or not isinstance(m, (int, float)) or not (math.isfinite(m) and m > 0)):
            raise UsageError(f"--margin must be a positive number (the equivalence margin, +-, in the metric's units); "
                             f"received {m}")
        int_in(self.steps, "--steps", 1, MAX_STEPS)
        if self.steps is not None and self.epochs is not None:
            raise UsageError("give --epochs or --steps, not both (--steps counts optimizer steps across epochs)")
        from ..factory import split_spec

        for flag, spec in (("--model", self.model), ("--data", self.data)):
            if spec is not None:
                split_spec(spec, flag)
        float_in(self.lr, "--lr", 0.0, 10.0, lo_open=True)
        int_in(self.batch_size, "--batch-size", 1, MAX_BATCH)
        if (self.lr is not None or self.batch_size is not None) and self.model is None:
            raise UsageError("--lr and --batch-size go with --model/--data (a built-in dataset has its own)")
        if (self.model is None) != (self.data is None):
            given, missing = ("--model", "--data") if self.data is None else ("--data", "--model")
            raise UsageError(f"{given} needs {missing} too: parity trains your model factory on your data factory's "
                             "(train, validation) datasets")

    @property
    def equivalence_margin(self) -> float:
        """The TOST margin: ``margin``, or the tolerance when none is given."""
        return self.tolerance if self.margin is None else float(self.margin)

    @property
    def seed_list(self) -> list[int]:
        """The seeds to run, in order."""
        return list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)


def _whole(seed) -> bool:
    """A seed is a whole number >= 0 (an int, or a numpy integer); 1.5 must not quietly become 1."""
    import numbers

    return isinstance(seed, numbers.Integral) and not isinstance(seed, bool) and int(seed) >= 0
