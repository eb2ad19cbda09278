"""``ampkit plan``: the whole loop, from diagnosis to a plan that is proven faster and not worse."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from ..errors import UsageError
from ..plan_format import Plan
from ..precision import parse_mode_list

__all__ = ["PlanConfig", "parse_budget", "run_plan", "DEFAULT_MODES"]

DEFAULT_MODES = ("fp8", "bf16", "fp16")
_UNITS = {"": 1, "s": 1, "m": 60, "min": 60, "h": 3600}


def parse_budget(text) -> float | None:
    """'10m', '90s', '1h', '600' -> seconds (None stays None)."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(s|m|min|h)?\s*", str(text))
    if not m or float(m.group(1)) <= 0:
        raise UsageError(f"--budget must be a positive time like 90s, 10m or 1h; received {text!r}")
    return float(m.group(1)) * _UNITS[m.group(2) or ""]


@dataclass(frozen=True)
class PlanConfig:
    model: str | None = None
    workload: str | None = None
    data: str | None = None
    input_shape: tuple[int, ...] | None = None
    num_classes: int | None = None
    modes: tuple[str, ...] | None = None      # None: DEFAULT_MODES that run here
    budget_s: float | None = None
    device: str = "auto"
    steps: int = 20           # bench: timed steps per mode
    warmup: int = 5
    audit_steps: int = 2
    seeds: int = 3            # parity
    parity_steps: int = 40
    timeout: float | None = 1800.0

    def __post_init__(self) -> None:
        if bool(self.model) == bool(self.workload):
            raise UsageError("ampkit plan needs --model MODULE:FACTORY or --workload NAME (one of them)")
        if self.modes is not None:
            modes = parse_mode_list(",".join(self.modes) if not isinstance(self.modes, str) else self.modes)
            bad = [m for m in modes if m in ("fp32", "tf32")]
            if bad or not modes:
                raise UsageError("--modes lists the low-precision candidates (fp8, bf16, fp16); received "
                                 f"{','.join(self.modes) if not isinstance(self.modes, str) else self.modes!r}")
            object.__setattr__(self, "modes", tuple(dict.fromkeys(modes)))
        for name in ("steps", "audit_steps", "seeds", "parity_steps"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be >= 1; received {getattr(self, name)!r}")


@dataclass
class Attempt:
    """One candidate: what each stage measured and the verdict."""

    mode: str
    plan: dict | None = None
    speedup: float | None = None
    speedup_ci: list | None = None
    speedup_verdict: str | None = None
    plain_samples_per_s: float | None = None
    plan_samples_per_s: float | None = None
    island_price: float | None = None     # plain samples/s / plan samples/s (>1: the islands cost this much)
    finite: bool | None = None
    parity: str | None = None             # the equivalence verdict against fp32, or "not_measured"
    parity_verdict: str | None = None
    accepted: bool = False
    why: str = ""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class PlanRun:
    chosen: Plan | None = None
    attempts: list[Attempt] = field(default_factory=list)
    order: list[dict] = field(default_factory=list)    # the ordering bench: [{"mode", "samples_per_s", ...}]
    status: str = "accepted"                           # accepted | none_faster | none_trains | not_measured
    note: str = ""
    device: str = ""
    environment: dict = field(default_factory=dict)
    framework: str | None = None
    interrupted: bool = False  # Ctrl-C or SIGTERM stopped it: the attempts so far, nothing decided after


def _rows(report) -> dict:
    return {r.mode: r for r in report.results}


def run_plan(cfg: PlanConfig, framework: str = "auto", say=lambda text: None) -> PlanRun:
    from ..audit import driver as audit_driver
    from ..audit.config import AuditConfig
    from ..bench import driver as bench_driver
    from ..bench.config import BenchConfig
    from ..registry import get_backend
    from .propose import propose_plan

    backend = get_backend(framework)
    t0 = time.monotonic()
    target = backend.target(cfg.device)
    wanted = cfg.modes or DEFAULT_MODES
    candidates = [m for m in wanted if backend.training_support(m, target)[0]]
    skipped = [m for m in wanted if m not in candidates]
    run = PlanRun(device=target.label, framework=backend.name)
    for m in skipped:
        run.attempts.append(Attempt(m, why=f"cannot run on {target.label}: {backend.training_support(m, target)[2]}"))
    if not candidates:
        raise UsageError(f"none of the modes {', '.join(wanted)} runs on {target.label}; nothing to plan")
    common = dict(model=cfg.model, workload=cfg.workload, input_shape=cfg.input_shape, num_classes=cfg.num_classes,
                  device=cfg.device, timeout=cfg.timeout)
    fallback = None
    try:  # Ctrl-C or SIGTERM in any stage: stop, keep what was tried, decide nothing more
        say(f"measuring fp32 and {', '.join(candidates)} on this device (bench, {cfg.steps} steps each)")
        first = bench_driver.run(BenchConfig(modes=("fp32", *candidates), steps=cfg.steps, warmup=cfg.warmup,
                                             **common), backend)
        run.environment = first.environment
        rows = _rows(first)
        run.order = [{"mode": r.mode, "status": r.status, "samples_per_s": r.samples_per_s, "speedup": r.speedup_vs_fp32,
                      "speedup_verdict": r.speedup_verdict} for r in first.results]  # kept even when stopped
        _unless_stopped(first)
        candidates.sort(key=lambda m: -(rows[m].samples_per_s or 0.0) if m in rows else 0.0)
        for mode in candidates:
            if cfg.budget_s is not None and time.monotonic() - t0 > cfg.budget_s:
                run.attempts.append(Attempt(mode, why=f"not tried: the --budget of {cfg.budget_s:g} s was spent"))
                continue
            att = Attempt(mode)
            run.attempts.append(att)
            plain = rows.get(mode)
            if plain is None or plain.status in ("unsupported", "oom"):  # a non-finite run is what a plan may cure
                att.why = f"bench of {mode}: " + (f"{plain.status}: {plain.error or ''}".rstrip(": ") if plain else "no row")
                continue
            att.plain_samples_per_s = plain.samples_per_s
            say(f"{mode}: auditing")
            audit = _unless_stopped(audit_driver.run(AuditConfig(mode=mode, steps=cfg.audit_steps, **common), backend))
            if getattr(audit, "error", None):  # stopped by --timeout: a plan from part of the steps is no plan
                att.why = f"audit of {mode}: {audit.error}"
                continue
            plan = propose_plan(audit, backend.name)
            plan.evidence["audit_findings"] = [{"layer": f.layer, "kind": f.kind} for f in audit.findings]
            att.plan = plan.to_dict()
            if plan.modules:  # bench the plan next to fp32 and next to the plain mode (the islands' price)
                say(f"{mode}: bench of the plan ({summary_words(plan)})")
                bench = _unless_stopped(bench_driver.run(BenchConfig(modes=("fp32", mode), plan=plan.to_dict(),
                                                                     steps=cfg.steps, warmup=cfg.warmup, **common), backend))
                brows = _rows(bench)
                prow = brows.get(plan.label)
            else:  # no island: the plan is the plain mode, measured already next to fp32
                brows, prow = rows, plain
            if prow is None or prow.status != "ok":
                att.finite = False
                att.why = f"the plan's bench: {prow.status if prow else 'no row'} {(prow.error or '') if prow else ''}".strip()
                continue
            att.finite = True
            att.speedup, att.speedup_ci, att.speedup_verdict = prow.speedup_vs_fp32, prow.speedup_ci, prow.speedup_verdict
            att.plan_samples_per_s = prow.samples_per_s
            same = brows.get(mode)
            # the price of the islands: the plain mode's samples/s (timed even when its loss went non-finite) over the plan's
            if plan.modules and same is not None and same.samples_per_s and prow.samples_per_s:
                att.plain_samples_per_s = same.samples_per_s
                att.island_price = same.samples_per_s / prow.samples_per_s
            att.parity, att.parity_verdict = _parity(cfg, plan, backend.name, say)
            plan.evidence.update({"bench": {"speedup_vs_fp32": att.speedup, "speedup_ci": att.speedup_ci,
                                            "speedup_verdict": att.speedup_verdict,
                                            "plan_samples_per_s": att.plan_samples_per_s,
                                            "plain_samples_per_s": att.plain_samples_per_s,
                                            "island_price": att.island_price},
                                  "parity": {"equivalence": att.parity, "verdict": att.parity_verdict}})
            att.plan = plan.to_dict()
            good = att.parity != "not_equivalent" and att.parity_verdict != "fail"
            if good and att.speedup_verdict == "faster":
                att.accepted, att.why = True, "faster than fp32 and not shown worse"
                run.chosen = plan
                break
            att.why = ("parity: " + str(att.parity) if not good else
                       f"not faster than fp32 here: {att.speedup_verdict or 'no verdict'} "
                       f"({_x(att.speedup)}, interval {_ci(att.speedup_ci)})")
            if good and fallback is None:
                fallback = plan
    except KeyboardInterrupt:
        run.interrupted = True
        for att in run.attempts:
            if not att.why and not att.accepted:
                att.why = "stopped here (interrupted)"
    if run.chosen is None and run.interrupted:  # stopped before a decision: no plan, no verdict
        tried = "; ".join(f"{a.mode}: {a.why}" for a in run.attempts if a.why)
        run.chosen, run.status = Plan("fp32", {}, backend.name, {"why": "stopped before a candidate was decided"}), \
            "not_measured"
        run.note = "stopped before a candidate was decided: no plan written" + (f" ({tried})" if tried else "")
    elif run.chosen is None:
        if fallback is not None:
            run.chosen, run.status = fallback, "none_faster"
            run.note = (f"no mode is faster than fp32 on {target.label} (figures above); the plan written is the "
                        f"fastest candidate that trains finite and is not worse ({fallback.default}): use fp32 here")
        elif not any(a.finite is not None for a in run.attempts):  # nothing got as far as a bench of its plan
            why = "; ".join(f"{a.mode}: {a.why}" for a in run.attempts if a.why) or "no candidate"
            run.chosen, run.status = Plan("fp32", {}, backend.name, {"why": f"no candidate was measured ({why})"}), \
                "not_measured"
            run.note = f"no candidate mode was measured ({why}): the plan is plain fp32, not a finding about them"
        else:
            run.chosen, run.status = Plan("fp32", {}, backend.name, {"why": "no candidate trained finite and equivalent"}), "none_trains"
            run.note = "no candidate mode trains finite and equivalent to fp32 here: the plan is plain fp32"
    run.chosen.evidence["from"] = "ampkit plan (audit, bench, parity)"
    run.chosen.evidence["tried"] = [{"mode": a.mode, "accepted": a.accepted, "why": a.why} for a in run.attempts]
    return run


def _parity(cfg: PlanConfig, plan: Plan, framework: str, say) -> tuple[str, str | None]:
    if not cfg.data or not cfg.model:
        return "not_measured", None
    from ..parity import driver as parity_driver
    from ..parity.config import ParityConfig

    say(f"{plan.default}: parity of the plan against fp32 ({cfg.seeds} seeds, {cfg.parity_steps} steps)")
    rep = _unless_stopped(parity_driver.run(ParityConfig(modes=("fp32",), plan=plan.to_dict(), seeds=cfg.seeds,
                                                         steps=cfg.parity_steps, model=cfg.model, data=cfg.data,
                                                         device=cfg.device), framework))
    row = next((r for r in rep.results if r.mode == plan.label), None)
    if row is None:
        return "not_measured", None
    return (row.equivalence or {}).get("verdict") or "not_measured", row.verdict


def _unless_stopped(report):
    """A stage's report, or KeyboardInterrupt when Ctrl-C or SIGTERM stopped it (bench and parity
    return what finished, marked interrupted): the plan stops with the stage. A stage stopped by its
    own --timeout (``error``) is that candidate's failure, and the plan goes on."""
    if getattr(report, "interrupted", False) and not getattr(report, "error", None):
        raise KeyboardInterrupt
    return report


def _x(v) -> str:
    return "—" if v is None else f"{v:.2f}x"


def _ci(ci) -> str:
    return "—" if not ci or None in ci else f"{ci[0]:.2f}-{ci[1]:.2f}x"


def summary_words(plan: Plan) -> str:
    if not plan.modules:
        return f"all in {plan.default}"
    return f"{plan.default}, " + ", ".join(f"{p} in {m}" for p, m in plan.modules.items())
