"""``ampkit doctor``: per mode, supported? working? accelerated? and a recommendation."""

from __future__ import annotations

from .report import DoctorReport, ModeReport

__all__ = ["DoctorReport", "ModeReport", "run_doctor"]


def run_doctor(framework: str = "auto", device="auto", *, quick: bool = False, progress=None,
               thorough: bool = False) -> DoctorReport:
    """Run the doctor for one framework on one device and return its report (:mod:`.driver`).
    ``thorough``: also the self-tests that cannot change the recommendation (:func:`.driver.run`)."""
    from .driver import run

    return run(device, framework, quick=quick, progress=progress, thorough=thorough)
