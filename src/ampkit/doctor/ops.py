"""What doctor's driver (:mod:`ampkit.doctor.driver`) asks of a framework backend: small typed operations.

Part of :class:`ampkit.backends.base.Backend`; the flow around them -- capability, self-tests,
interleaved rounds against fp32, verdicts, the report, caching the verdict for ``auto`` -- is the
driver's, written once. A backend answers four questions about one mode on one
:class:`~ampkit.target.Target` and may wrap the whole run in a session.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:  # the protocol names them only in annotations: importing it loads no rounds
    from ..rounds import Work
    from ..target import Target


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


#: an fp8 self-test step's loss may differ from the same step's in bf16 by at most this (relative)
FP8_LOSS_GAP = 0.05


def fp8_loss_gap(l8: float, l16: float) -> tuple[float, str | None]:
    """The fp8 self-test's rule, the same in every framework: one step's fp8 loss against bf16's on a
    clean batch. (relative gap, why it fails — None when it passes)."""
    if not math.isfinite(l8):
        return math.nan, f"fp8 loss is {l8} on a clean batch"
    gap = abs(l8 - l16) / max(abs(l16), 1e-6)
    if gap > FP8_LOSS_GAP:
        return gap, f"fp8 loss {l8:.4g} differs from bf16's {l16:.4g} by {gap:.1%} (expected < {FP8_LOSS_GAP:.0%})"
    return gap, None
