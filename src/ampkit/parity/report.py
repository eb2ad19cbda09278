"""The parity document: per (mode, seed) runs, per-mode results and verdicts, the report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..display import ResultDisplay
from ..envelope import OPT_NUM, Enveloped, check, check_rows, envelope, known

ALPHA = 0.05
VERDICTS = ("baseline", "pass", "fail", "inconclusive", "not_measured")
EQUIVALENCE_VERDICTS = ("equivalent", "not_equivalent", "inconclusive", "not_measured")
#: the contract's keys (and types) of a parity document and of each result; the rest is optional
SCHEMA = {"dataset": str, "results": list}
RESULT_SCHEMA = {"mode": str, "metric": dict, "final_loss": dict, "delta_vs_fp32": OPT_NUM, "p_value": OPT_NUM,
                 "verdict": str}
RESULT_CHOICES = {"verdict": VERDICTS}


@dataclass
class RunRecord:
    """One (mode, seed) training run."""

    mode: str
    seed: int
    train_loss: list[float]       # per epoch, mean over its batches
    test_accuracy: list[float]    # per epoch
    test_loss: list[float]        # per epoch
    skipped_steps: int
    seconds: float
    error: str | None = None      # the run raised (one line); its numbers are what it reached before
    steps: int | None = None      # optimizer steps taken (with --steps; None for whole epochs)
    rank: int | None = None       # the torchrun rank that ran it (None: a single process)
    not_measured: str | None = None  # why the run says nothing about its mode (fp8 with no layer converted)
    first_loss: float | None = None  # the first training step's loss (did the loss fall? parity.chance)

    @classmethod
    def from_dict(cls, d: dict) -> RunRecord:
        """A run as a document holds it; a non-finite value written as null reads back as NaN."""
        rec = cls(**{"mode": "", "seed": 0, "train_loss": [], "test_accuracy": [], "test_loss": [],
                     "skipped_steps": 0, "seconds": 0.0, **known(cls, d)})
        for name in ("train_loss", "test_accuracy", "test_loss"):
            values = getattr(rec, name)
            if isinstance(values, list):
                setattr(rec, name, [float("nan") if v is None else v for v in values])
        return rec


@dataclass
class ParityResult:
    mode: str
    seeds: list[int]
    final_loss: dict
    metric: dict
    delta_vs_fp32: float | None
    p_value: float | None
    verdict: str                  # baseline | pass | fail | inconclusive
    reason: str = ""
    skipped_steps: int = 0
    runs: list[RunRecord] = field(default_factory=list)
    #: TOST: {"verdict": equivalent | not_equivalent | inconclusive, "ci": [lo, hi] | None,
    #: "seeds_needed": int | None, "p_value", "degenerate", "margin", "reason"}; None for the baseline
    equivalence: dict | None = None
    nonfinite_seeds: int = 0      # seeds whose training loss or metric became inf/NaN
    loss_nonfinite_seeds: list[int] = field(default_factory=list)  # of those, the seeds whose training loss did
    plan: dict | None = None      # mode "plan:<default>" (--plan): the precision plan it trained with
    #: --runs: the step-time speedup over fp32 from the runs' own step times {"speedup_vs_fp32", "ci", "steps"}
    step_time: dict | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        if d.get("step_time") is None:  # only parity --runs measures it: other documents stay as they were
            d.pop("step_time", None)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ParityResult:
        """A result as a document holds it (unchecked: :meth:`ParityReport.from_dict` checks); an older
        document's missing seeds and runs are empty."""
        runs = [RunRecord.from_dict(r) for r in d.get("runs") or [] if isinstance(r, dict)]
        return cls(**{"seeds": [], "final_loss": {}, "metric": {}, "delta_vs_fp32": None, "p_value": None,
                      "verdict": "", **known(cls, d), "runs": runs})


@dataclass
class ParityReport(Enveloped, ResultDisplay, command="parity"):
    dataset: str
    device: str
    results: list[ParityResult]
    environment: dict
    tolerance: float
    epochs: int
    alpha: float = ALPHA
    elapsed_s: float | None = None
    interrupted: bool = False
    note: str | None = None        # what "auto" in the modes resolved to
    margin: float | None = None    # the equivalence margin (None in older documents: the tolerance)
    steps: int | None = None       # optimizer steps per run, when given instead of epochs
    metric: str = "accuracy"       # the metric the verdicts judge (higher is better unless it is a loss)
    #: the whole grid this document belongs to: {"modes", "seeds", "identity"} (ampkit.parity.grid)
    grid: dict | None = None
    shard: str | None = None       # "I/N": a partial document holding the I-th share of the grid's runs
    world_size: int | None = None  # under torchrun: the processes the runs were spread over
    #: an interrupted run: the finished runs of seeds whose other modes did not finish; outside the
    #: statistics (nothing to pair them with), kept so that --resume and --merge need not run them again
    unpaired_runs: list[RunRecord] = field(default_factory=list)
    #: the best constant predictor on the validation data (ampkit.parity.chance.Chance.to_dict), when known
    chance: dict | None = None
    #: why the fp32 baseline did not learn (every mode is then inconclusive); None when it did
    baseline_not_learned: str | None = None

    @property
    def partial(self) -> bool:
        return self.shard is not None

    @property
    def failed(self) -> bool:
        """Not proven: a mode failed or is inconclusive (exit 1 for both; the words tell them apart). A
        partial document has no verdicts: it failed when one of its runs raised."""
        if self.partial:
            return any(run.error for r in self.results for run in r.runs)
        return any(r.verdict in ("fail", "inconclusive") for r in self.results)

    def to_dict(self) -> dict:
        return envelope("parity", self.environment, framework=self.framework, dataset=self.dataset,
                        device=self.device, tolerance=self.tolerance, alpha=self.alpha, epochs=self.epochs,
                        results=[r.to_dict() for r in self.results], elapsed_s=self.elapsed_s,
                        interrupted=self.interrupted, note=self.note, margin=self.margin, steps=self.steps,
                        metric=self.metric, grid=self.grid, shard=self.shard, world_size=self.world_size,
                        chance=self.chance, baseline_not_learned=self.baseline_not_learned,
                        **({"unpaired_runs": [asdict(r) for r in self.unpaired_runs]} if self.unpaired_runs else {}))

    @classmethod
    def from_dict(cls, d: dict) -> ParityReport:
        """Raises :class:`~ampkit.envelope.DocumentError` for a malformed document; an older document's
        missing device, tolerance and epochs are empty."""
        check(d, SCHEMA)
        check_rows(d["results"], RESULT_SCHEMA, "results", RESULT_CHOICES)
        env = d.get("environment")
        return cls(dataset=d["dataset"], device=d.get("device", ""),
                   results=[ParityResult.from_dict(r) for r in d["results"]],
                   environment=env if isinstance(env, dict) else {}, tolerance=d.get("tolerance"),
                   epochs=d.get("epochs"), alpha=d.get("alpha", ALPHA), elapsed_s=d.get("elapsed_s"),
                   interrupted=bool(d.get("interrupted", False)), note=d.get("note"), margin=d.get("margin"),
                   steps=d.get("steps"), metric=d.get("metric") or "accuracy",
                   grid=d.get("grid") if isinstance(d.get("grid"), dict) else None,
                   shard=d.get("shard") if isinstance(d.get("shard"), str) else None, world_size=d.get("world_size"),
                   chance=d.get("chance") if isinstance(d.get("chance"), dict) else None,
                   baseline_not_learned=d.get("baseline_not_learned") if isinstance(d.get("baseline_not_learned"), str)
                   else None,
                   unpaired_runs=[RunRecord.from_dict(r) for r in d.get("unpaired_runs") or [] if isinstance(r, dict)])
