"""The typed protocol every framework backend implements: small operations, never a whole command.

Each command's flow -- validation, the default workload, ``auto``, isolating user code, repeats,
the report -- is written once, in a neutral driver (``ampkit.<command>.driver``). A driver asks its
backend only for small operations with typed inputs and outputs:

- :class:`EnvironmentOps` (here): the device, the environment section, mode support, ``auto``, the
  default and built-in workloads;
- :class:`ampkit.doctor.ops.DoctorOps`, :class:`ampkit.bench.ops.BenchOps`,
  :class:`ampkit.parity.ops.ParityOps`, :class:`ampkit.audit.ops.AuditOps`: each command's own.

A new framework is one folder beside ``torch/`` and ``tensorflow/`` whose package defines a class
deriving from :class:`Backend` with these methods (``tests/numpy_backend.py`` is one in plain numpy),
registered by name (:func:`ampkit.registry.register_backend`). Nothing outside a backend folder
imports a framework.

Capabilities are declared, never probed: an optional operation (:data:`OPTIONAL`) is part of the
protocol with a default that says what a backend without it gets -- ``--strategy`` refused,
no size table, parity not spread over processes, no audit session of a kind (the one table
``audit_sessions``, keyed by :func:`ampkit.audit.ops.session_kind`; ``--compile``, the contract
findings and the ``input`` record are the session's, :class:`ampkit.audit.ops.AuditSession`) -- so
a driver calls it like any other, without ``getattr``/``hasattr`` on the backend.

Dependencies point one way: a backend imports from the command packages only their protocol and
types (``ops``, ``config``, ``report``) and neutral helpers; never a driver, a runner, a command's
library entry or the registry (:mod:`ampkit.registry`) (``tests/architecture/test_direction.py``).
"""

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
OPTIONAL = frozenset({"bench_strategies", "bench_size_work", "bench_threads", "bench_doctor_verdict", "parity_group", "audit_sessions"})


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
