"""What doctor's driver (:mod:`ampkit.doctor.driver`) asks of a framework backend: small typed operations.

Part of :class:`ampkit.backends.base.Backend`; the flow around them -- capability, self-tests,
interleaved rounds against fp32, verdicts, the report, caching the verdict for ``auto`` -- is the
driver's, written once. A backend answers four questions about one mode on one
:class:`~ampkit.target.Target` and may wrap the whole run in a session.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from typing import Protocol, runtime_checkable

from ..target import Target
from .measure import Work


@runtime_checkable
class DoctorOps(Protocol):
    def doctor_session(self, target: Target, threads: int | None = None) -> AbstractContextManager:
        """The scope the whole doctor runs in, restored after (``contextlib.nullcontext()`` when
        nothing needs it): ``threads`` CPU threads for the rounds (:mod:`ampkit.threads`; None: the
        framework's count stays), GPU memory taken as needed (TensorFlow). The environment read
        inside it (``environment.cpu.threads``) says the count the rounds ran on."""

    def selftest(self, mode: str, target: Target) -> tuple[str, str]:
        """Really train in ``mode`` on ``target``: ``("pass"|"fail"|"skip", what was checked or what
        broke)``. Called only for a mode :meth:`~ampkit.backends.base.EnvironmentOps.mode_support`
        accepts; it reports, it never raises."""

    def doctor_work(self, mode: str, target: Target) -> Work:
        """The mode's ops to time against fp32, built and warmed by the caller: kernels (a matmul, a
        convolution) and short training steps, each a zero-argument callable that has finished when
        it returns (or is timed by ``Work.clock``). Sized for ``target.accelerator``. May raise: the
        mode is then reported with the error."""

    def auto_fingerprint(self, target: Target) -> dict:
        """The environment a measured verdict holds for (:func:`ampkit.auto_cache.fingerprint`): the
        key ``auto`` finds the doctor's verdict under later."""

    def doctor_variants(self, supported: Collection[str], target: Target,
                        say: Callable[[str], None], *, thorough: bool = False) -> dict[str, dict]:
        """Other builds of the framework self-tested beside the main one, as the report's
        ``variants`` (``{"tf_keras": {"label", "version", "modes": {mode: {"selftest", "detail"}}}}``);
        ``{}`` where there are none. ``supported``: the modes the main table found supported. A
        variant that cannot change the recommendation may be deferred unless ``thorough``: then
        ``{"label", "version", "modes": {}, "deferred": why}``."""
