"""``ampkit doctor``: per mode, supported? working? accelerated? and a recommendation."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

from .._callable import make_callable

if TYPE_CHECKING:
    from .report import DoctorReport

__all__ = ["DoctorConfig", "DoctorReport", "ModeReport", "run_doctor"]


def run_doctor(framework: str = "auto", device="auto", *, quick: bool = False, progress=None,
               thorough: bool = False, threads: int | None = None) -> DoctorReport:
    """Run the doctor for one framework on one device and return its report; ``ampkit.doctor(...)``
    is the same call (the package is callable, like ``ampkit.bench`` and ``ampkit.parity``).

    Args:
        framework: ``auto`` (torch when it can be imported, else tensorflow), ``torch`` or
            ``tensorflow``; any other name is a :class:`~ampkit.errors.UsageError` (a ``ValueError``).
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        quick: self-tests only (no measurement, nothing cached for ``auto``).
        progress: ``progress(msg)`` gets each step in words; in a Jupyter kernel the default (None)
            shows them in one display that updates in place; ``False`` shows nothing.
        thorough: also the self-tests that cannot change the recommendation (:func:`.driver.run`).
        threads: the CPU threads the rounds run on (``--threads``); None: one on a CPU, the same
            default as :func:`ampkit.bench` (:mod:`ampkit.threads`); the report's
            ``environment.cpu.threads`` and the cached verdict record the count.

    Returns:
        DoctorReport: per mode supported, self-test, measured speedup and verdict, and the
        recommendation; ``.to_dict()`` is the JSON document ``ampkit doctor --json`` writes.
    """
    from ..progress import shown
    from ..registry import parse_framework
    from .config import DoctorConfig
    from .driver import run

    config = DoctorConfig(device=device, quick=quick, thorough=thorough, threads=threads)
    framework = parse_framework(framework)  # a bad name: one UsageError before anything runs
    return shown(progress, "doctor", "doctor", lambda cb, _live: run(config, framework, progress=cb))


make_callable(__name__, run_doctor, ("config", "report"))
#: ``inspect.signature(ampkit.doctor)`` (the module is callable) is the function's, not ``(*args, **kwargs)``
__signature__ = inspect.signature(run_doctor)
