"""Bench results: dataclasses that serialise to the contract's JSON (and CSV) and back."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..display import ResultDisplay
from ..envelope import OPT_NUM, Enveloped, check, check_rows, envelope, known

STATUSES = ("ok", "unsupported", "oom", "error")
#: the contract's keys (and types) of a bench document and of each row; the rest is optional
SCHEMA = {"workload": str, "device": str, "results": list}
ROW_SCHEMA = {"mode": str, "status": str, "samples_per_s": OPT_NUM, "peak_memory_bytes": OPT_NUM,
              "max_batch_size": OPT_NUM, "speedup_vs_fp32": OPT_NUM}
ROW_CHOICES = {"status": STATUSES}
SPEEDUP_DEFINITION = ("speedup_vs_fp32 = samples_per_s / fp32's samples_per_s, paired by round where the modes ran "
                      "interleaved (pairing: interleaved): the median over the rounds of the mode's samples/s over "
                      "fp32's in the same round (a round's time: the fastest step of its block), speedup_ci the "
                      "95% distribution-free interval of that median (order statistics of the rounds, all repeats and process sets "
                      "pooled: on a CPU the rounds are split over 2 or 3 sets of fresh processes, processes); run one after "
                      "another (pairing: sequential, --batch-size auto or under a launcher): the ratio of the rows' "
                      "samples_per_s, speedup_ci over the timed steps (--repeats: over the repeats, paired); "
                      "samples_per_s = batch_size / median step time; null with flags when the loss diverged from "
                      "fp32's or every timed step was skipped")


@dataclass
class BenchRow:
    mode: str
    status: str = "ok"
    error: str | None = None
    batch_size: int | None = None
    samples_per_s: float | None = None
    step_ms: dict = field(default_factory=lambda: {"p50": None, "p90": None})
    peak_memory_bytes: int | None = None
    max_batch_size: int | None = None
    speedup_vs_fp32: float | None = None
    memory_saving_vs_fp32: float | None = None  # fp32 peak / this mode's peak (>1: uses less)
    skipped_steps: int = 0              # timed steps the loss scaler skipped (inf/NaN gradients)
    final_loss: float | None = None     # the loss of the last step (all modes: same weights, batch, steps)
    tflops: float | None = None
    mfu: float | None = None
    steps: int | None = None
    memory_source: str | None = None  # how peak memory was measured
    device_name: str | None = None
    search: list = field(default_factory=list)  # (batch size, fits, peak bytes) tried by --batch-size auto
    repeats: int = 1                    # runs of this mode (--repeats), folded into this row
    speedup_ci: list | None = None      # 95% interval of speedup_vs_fp32 (one run: its steps; repeats: paired)
    runs: list = field(default_factory=list)  # samples/s of each run (a repeat, or a set of processes: .rounds)
    resolved_from: str | None = None    # "auto" when auto chose this mode
    resolved_reason: str | None = None
    warmup: int | None = None           # warm-up steps run before the timed ones
    warmup_skipped_steps: int = 0       # warm-up steps the loss scaler skipped
    first_loss: float | None = None     # the loss of the first step (before any update)
    step_times_ms: list = field(default_factory=list)  # every timed step (all repeats, in order)
    speedup_verdict: str | None = None  # faster / slower / no measurable difference / small difference
    speedup_note: str | None = None     # how speedup_vs_fp32 was measured, or why it is null
    flags: list = field(default_factory=list)  # "diverged", "all_timed_steps_skipped": no speedup claimed
    warning: str | None = None          # the flags in words
    emulated: bool = False              # fp8 without fp8 hardware (torchao's emulation): memory, never a speedup
    breakdown: dict | None = None       # --explain: {category: share of the step} (ampkit.breakdown)
    breakdown_ms: dict | None = None    # --explain: the same in ms of the median timed step
    explanation: list | None = None     # --explain: sentences against fp32's breakdown (ampkit.bench.explain)
    explain_detail: dict | None = None  # --explain: how it was profiled, the model's matmuls, the size table
    replicas: int = 1                   # devices the step ran on in sync (--strategy mirrored); batch_size is global
    compiled: bool = False              # --compile: torch.compile'd model (Keras: jit_compile=True)
    compile_s: float | None = None      # --compile: seconds of the first (compiling) steps, outside the throughput
    graph_breaks: int | None = None     # --compile: torch._dynamo's graph breaks in the model (null on Keras)
    recompiles: int | None = None       # --compile: torch._dynamo's recompilations (null on Keras)
    graph_break_reasons: list = field(default_factory=list)  # --compile: why dynamo broke the graph (first few)
    speedup_vs_eager: float | None = None  # --compile both: samples/s / the same mode's eager samples/s
    plan: dict | None = None            # mode "plan:<default>" (--plan): the precision plan it ran
    rounds: int | None = None           # interleaved: rounds timed (all repeats), each a block of steps
    round_ms: list = field(default_factory=list)  # interleaved: each round's fastest step (ms; null: not run)
    processes: int | None = None        # interleaved: fresh processes that timed the mode's rounds (one per set and repeat)
    rounds_per_process: list = field(default_factory=list)  # interleaved: how many of round_ms each of them timed, in order
    threads: int | None = None          # CPU threads the timed steps ran on, read in the mode's process (null: a GPU)
    clock: str | None = None            # how a step was timed: "thread_cpu" (a CPU at one thread), "wall", "cuda_events"
    cpus: list | None = None            # the CPUs the mode's process could run on, read there (null: a GPU); every mode the same

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> BenchRow:
        """A row as a child process or a document sends it (unchecked: :meth:`BenchReport.from_dict` checks)."""
        return cls(**known(cls, d))

    def csv_row(self) -> dict:
        d = self.to_dict()
        d["step_ms_p50"] = self.step_ms.get("p50")
        d["step_ms_p90"] = self.step_ms.get("p90")
        d["speedup_ci_low"], d["speedup_ci_high"] = self.speedup_ci or (None, None)
        d["flags"] = ";".join(self.flags) or None
        return d


@dataclass
class BenchReport(Enveloped, ResultDisplay, command="bench"):
    workload: str
    device: str
    results: list[BenchRow]
    environment: dict
    world_size: int = 1
    flops_per_sample: float | None = None
    config: dict = field(default_factory=dict)
    note: str | None = None
    interrupted: bool = False
    sample_inputs: object = None  # per-sample input shape(s) the workload ran with, e.g. [3, 32, 32]
    replicas: int = 1             # devices each step ran on in sync (--strategy mirrored)
    pairing: str = "sequential"   # "interleaved": the modes' processes timed in alternating rounds (.rounds)
    load_change: dict | None = None  # the machine's load changed during the rounds: {"spread", ..., "line"}
    #: the doctor's cached verdict read when auto resolved ({"recommended", "measured_at", "threads"}) and
    #: "disagreements": bench/doctor_check's sentences ([] when they agree); None: no doctor verdict cached
    doctor_check: dict | None = None
    input: dict | None = None     # --data: the user's batch that was timed ({"kind": "data", "from", "shape", "dtype"})

    @property
    def failed(self) -> bool:
        """A mode failed for real (an exception or a non-finite loss): exit code 1. Unsupported and
        out-of-memory rows are findings, not failures."""
        return any(r.status == "error" for r in self.results)

    def to_dict(self) -> dict:
        return envelope("bench", self.environment, workload=self.workload, framework=self.framework,
                        device=self.device, world_size=self.world_size, results=[r.to_dict() for r in self.results],
                        flops_per_sample=self.flops_per_sample, config=self.config, note=self.note,
                        interrupted=self.interrupted, sample_inputs=self.sample_inputs, replicas=self.replicas,
                        speedup_definition=SPEEDUP_DEFINITION, doctor_check=self.doctor_check, pairing=self.pairing,
                        load_change=self.load_change, **({"input": self.input} if self.input else {}))

    @classmethod
    def from_dict(cls, d: dict) -> BenchReport:
        """Raises :class:`~ampkit.envelope.DocumentError` for a malformed document."""
        check(d, SCHEMA)
        check_rows(d["results"], ROW_SCHEMA, "results", ROW_CHOICES)
        env, config = d.get("environment"), d.get("config")
        return cls(workload=d["workload"], device=d["device"], results=[BenchRow.from_dict(r) for r in d["results"]],
                   environment=env if isinstance(env, dict) else {}, world_size=d.get("world_size", 1),
                   flops_per_sample=d.get("flops_per_sample"), config=config if isinstance(config, dict) else {},
                   note=d.get("note"), interrupted=bool(d.get("interrupted", False)),
                   sample_inputs=d.get("sample_inputs"), replicas=int(d.get("replicas", 1) or 1),
                   doctor_check=d.get("doctor_check") if isinstance(d.get("doctor_check"), dict) else None,
                   pairing=d.get("pairing") or "sequential",
                   load_change=d.get("load_change") if isinstance(d.get("load_change"), dict) else None,
                   input=d.get("input") if isinstance(d.get("input"), dict) else None)


def derive_relative(rows: list[BenchRow], runs: dict[str, list[BenchRow]] | None = None) -> None:
    """speedup_vs_fp32 (the samples/s ratio), its interval and words, memory_saving_vs_fp32
    (fp32 peak / mode peak), and the flags that withhold a speedup (see :mod:`ampkit.bench.judge`).

    ``runs``: each mode's rows per repeat (``--repeats`` > 1): the interval then comes from the
    paired repeats; otherwise from the timed steps of the one run.
    """
    from . import judge

    base = next((r for r in rows if r.mode == "fp32" and r.status == "ok"), None)
    for r in rows:
        r.speedup_vs_fp32 = r.memory_saving_vs_fp32 = r.speedup_ci = r.speedup_verdict = None
        r.flags, r.warning, r.speedup_note = [], None, None
        if r.status != "ok":
            if r.status == "error" and r.steps and r.skipped_steps >= r.steps:  # e.g. a NaN loss, every step skipped
                r.flags.append(judge.ALL_SKIPPED)
            continue
        warnings = []
        if r.steps and r.skipped_steps >= r.steps:
            r.flags.append(judge.ALL_SKIPPED)
            warnings.append(f"the loss scaler skipped all {r.skipped_steps} timed steps (inf/NaN gradients): "
                            "no optimizer update was timed")
        if base is not None and r is not base and r.batch_size == base.batch_size:
            diverged = judge.divergence(r.final_loss, base.final_loss, base.first_loss)
            if diverged:
                r.flags.append(judge.DIVERGED)
                warnings.append(diverged)
        if warnings:
            r.warning = "; ".join(warnings)
            r.speedup_note = "no speedup claimed: " + " and ".join(
                {"diverged": "its loss diverged from fp32's", judge.ALL_SKIPPED: "every timed step was skipped"}[f]
                for f in r.flags)
        if base is None:
            continue
        if r.peak_memory_bytes and base.peak_memory_bytes:
            r.memory_saving_vs_fp32 = base.peak_memory_bytes / r.peak_memory_bytes
        if r.emulated:  # fp8 numerics on hardware without fp8: its time says nothing about fp8's speed
            r.speedup_note = "no speedup claimed: fp8 ran in emulation (torchao, or Keras's float8 layers; this hardware has no fp8)"
            continue
        if r.flags or not (r.samples_per_s and base.samples_per_s):
            continue
        paired = _paired(r, base)
        r.speedup_vs_fp32 = paired.point if paired is not None else r.samples_per_s / base.samples_per_s
        if r is base:  # the baseline against itself (as the doctor reports it), where the others have intervals
            r.speedup_verdict = "baseline"
            r.speedup_ci = [1.0, 1.0] if (runs and r.repeats > 1) or len(r.step_times_ms) >= 2 else None
            continue
        est = paired if paired is not None else _interval(r, base, runs)
        if est is not None and est.low is not None:
            # the same statistic as the point; clamped so that rounding never leaves the shown speedup outside
            r.speedup_ci = [min(est.ci[0], round(r.speedup_vs_fp32, 4)), max(est.ci[1], round(r.speedup_vs_fp32, 4))]
            r.speedup_verdict = judge.words(est)
            r.speedup_note = (f"median of the samples/s ratios of {est.n} interleaved rounds, each paired with fp32's; "
                              "95% interval: order statistics of the rounds" if paired is not None
                              else f"samples/s ratio; 95% interval from {est.n} paired repeats" if runs and r.repeats > 1
                              else f"samples/s ratio; 95% interval from this run's timed steps "
                                   f"({len(base.step_times_ms)} fp32, {len(r.step_times_ms)} {r.mode})")
        else:
            r.speedup_note = "samples/s ratio; no interval (fewer than 2 timed steps)"


def _paired(row: BenchRow, base: BenchRow):
    """Interleaved rows: the median of the per-round paired ratios and its interval (:mod:`.rounds`),
    or None (a row without rounds, or none in common with fp32's)."""
    if not (row.round_ms and base.round_ms and row.batch_size and base.batch_size):
        return None
    from .rounds import paired_speedup

    return paired_speedup(base.round_ms, row.round_ms, base.batch_size, row.batch_size)


def _interval(row: BenchRow, base: BenchRow, runs):
    """The speedup's estimate: paired repeats when there are several, else the one run's steps."""
    from . import judge

    if runs and row.repeats > 1:
        pairs = [(b.samples_per_s, m.samples_per_s) for b, m in zip(runs.get("fp32", []), runs.get(row.mode, []))
                 if b.status == "ok" and m.status == "ok" and b.samples_per_s and m.samples_per_s]
        if len(pairs) < 2:
            return None
        return judge.repeats_speedup([p[0] for p in pairs], [p[1] for p in pairs])
    if len(base.step_times_ms) < 2 or len(row.step_times_ms) < 2 or not (row.batch_size and base.batch_size):
        return None
    return judge.steps_speedup(base.step_times_ms, base.batch_size, row.step_times_ms, row.batch_size)
