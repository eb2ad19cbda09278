"""``ampkit doctor``: per mode, supported? working? accelerated? and a recommendation."""

from __future__ import annotations

from .report import DoctorReport, ModeReport

__all__ = ["DoctorReport", "ModeReport", "run_doctor"]


def run_doctor(framework: str = "auto", device="auto", *, quick: bool = False, progress=None,
               thorough: bool = False) -> DoctorReport:
    """Run the doctor for one framework on one device and return its report (:mod:`.driver`).
    ``progress(msg)`` gets each step in words; in a Jupyter kernel the default (None) shows them in
    one display that updates in place; ``False`` shows nothing. ``thorough``: also the self-tests
    that cannot change the recommendation (:func:`.driver.run`)."""
    from ..progress import shown
    from .driver import run

    return shown(progress, "doctor", "doctor", lambda cb, _live: run(device, framework, quick=quick, progress=cb,
                                                                      thorough=thorough))
