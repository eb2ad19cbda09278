"""The typed protocol every framework backend implements: small operations, never a whole command."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..audit.ops import AuditOps
from ..bench.ops import BenchOps
from ..doctor.ops import DoctorOps
from ..parity.ops import ParityOps

if TYPE_CHECKING:
    from ..target import Target

__all__ = ["OPTIONAL", "AuditOps", "Backend", "BenchOps", "DoctorOps", "EnvironmentOps", "ParityOps"]

#: the protocol's optional operations: declared with a default ("unsupported, because ...", or none),
#: which a backend deriving from :class:`Backend` inherits
OPTIONAL = frozenset({"bench_strategies", "bench_size_work", "bench_threads", "bench_doctor_verdict", "bench_probe_fork",
                      "parity_group", "audit_sessions"})


@runtime_checkable
class EnvironmentOps(Protocol):
    name: str

    def target(self, device: str) -> Target:
        """``--device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``) resolved here; a device this
        framework cannot use is a :class:`~ampkit.errors.UsageError` naming the flag."""

    def environment(self, target: Target) -> dict:
        """The ``environment`` section of the documents (``ampkit.environment.base_environment`` plus
        the framework's versions and device)."""

    def mode_support(self, mode: str, target: Target) -> tuple[bool, str]:
        """Whether ``mode`` can run on ``target`` at all, with the reason in words."""

    def training_support(self, mode: str, target: Target) -> tuple[bool, bool, str]:
        """``(ok, emulated, why)``: whether this framework's engine can train in ``mode`` on
        ``target``, natively or in an emulation that gives the mode's numerics without its speed
        (fp8 through torchao where the hardware has no fp8); ``mode_support`` stays the hardware's
        answer."""

    def resolve_auto(self, target: Target) -> tuple[str, str]:
        """The mode ``auto`` means on ``target`` and why (measured where a measurement exists)."""

    def default_workload(self, target: Target) -> str:
        """The built-in workload that runs when none is named."""

    def check_workload(self, name: str) -> str:
        """A built-in workload's canonical name; an unknown one is a UsageError listing the choices."""


@runtime_checkable
class Backend(EnvironmentOps, DoctorOps, BenchOps, ParityOps, AuditOps, Protocol):
    """Everything a driver may ask of a framework."""
