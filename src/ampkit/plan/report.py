"""The document of ``ampkit plan`` (``"command": "plan"``): what was tried, each figure, the plan chosen."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..display import ResultDisplay
from ..envelope import Enveloped, check, envelope
from ..plan_format import Plan, load_plan

__all__ = ["PlanReport", "STATUSES"]

#: accepted: faster than fp32 and not worse; none_faster: no mode is faster here (the plan is the best
#: that trains); none_trains: no candidate trained finite and equivalent (the plan is plain fp32);
#: not_measured: no candidate got as far as a bench of its plan (a --budget spent, an audit stopped,
#: every bench row unsupported): plain fp32, and no verdict about the candidates
STATUSES = ("accepted", "none_faster", "none_trains", "not_measured")
SCHEMA = {"status": str, "plan": dict, "tried": list}


@dataclass
class PlanReport(Enveloped, ResultDisplay, command="plan"):
    plan: Plan
    tried: list[dict]
    status: str
    device: str
    environment: dict = field(default_factory=dict)
    workload: str | None = None
    order: list[dict] = field(default_factory=list)
    note: str | None = None
    out: str | None = None            # where the plan file was written
    use: str | None = None            # the one line that applies it
    interrupted: bool = False

    @property
    def failed(self) -> bool:
        return False  # no mode being faster is an answer, not a failure

    @classmethod
    def from_run(cls, run, workload: str | None, out: str | None, use: str | None) -> PlanReport:
        return cls(run.chosen, [a.to_dict() for a in run.attempts], run.status, run.device, run.environment,
                   workload, run.order, run.note or None, out, use, interrupted=getattr(run, "interrupted", False))

    def to_dict(self) -> dict:
        return envelope("plan", self.environment, framework=self.framework or self.plan.framework,
                        workload=self.workload, device=self.device, status=self.status, plan=self.plan.to_dict(),
                        tried=self.tried, order=self.order, note=self.note, out=self.out, use=self.use,
                        interrupted=self.interrupted)

    @classmethod
    def from_dict(cls, d: dict) -> PlanReport:
        """Raises :class:`~ampkit.envelope.DocumentError` for a malformed document."""
        from ..envelope import DocumentError
        from ..errors import UsageError

        check(d, SCHEMA, choices={"status": STATUSES})
        try:
            plan = load_plan(d["plan"])
        except UsageError as exc:
            raise DocumentError(f"plan: {exc}") from None
        env = d.get("environment")
        return cls(plan, [t for t in d["tried"] if isinstance(t, dict)], d["status"], d.get("device", ""),
                   env if isinstance(env, dict) else {}, d.get("workload"), d.get("order") or [], d.get("note"),
                   d.get("out"), d.get("use"), bool(d.get("interrupted", False)))
