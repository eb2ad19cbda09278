"""What a doctor run is asked to do: a frozen config, checked once when it is made (like
:class:`~ampkit.bench.config.BenchConfig` and :class:`~ampkit.parity.config.ParityConfig`).

What the run decides -- the device ``auto`` became, the recommendation -- is its report's
(:class:`~ampkit.doctor.report.DoctorReport`), never written back here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError
from ..precision import MODES, parse_mode


@dataclass(frozen=True)
class DoctorConfig:
    """``ampkit doctor``'s flags and ``run_doctor``'s keywords.

    ``device``: ``auto``, ``cpu``, ``cuda``, ``cuda:N`` (resolved by the backend). ``quick``:
    self-tests only (no measurement, nothing cached for ``auto``). ``thorough``: also the self-tests
    that cannot change the recommendation (:func:`ampkit.doctor.driver.run`). ``modes``: the rows
    of the report, canonical (aliases accepted; ``auto`` is not a row: it is what the doctor
    recommends); every mode by default. ``threads``: the CPU threads the rounds run on
    (:mod:`ampkit.threads`: None is the policy's default, one on a CPU; checked here, 1 to the
    logical CPUs).
    """

    device: str = "auto"
    quick: bool = False
    thorough: bool = False
    modes: tuple[str, ...] = MODES
    threads: int | None = None

    def __post_init__(self) -> None:
        if hasattr(self.device, "type") and not isinstance(self.device, str):  # a torch.device as its name
            object.__setattr__(self, "device", str(self.device))
        if not isinstance(self.device, str):
            raise UsageError(f"--device must be auto, cpu, cuda or cuda:N; received {self.device!r}")
        for name, value in (("quick", self.quick), ("thorough", self.thorough)):
            if not (value is None or isinstance(value, int)):  # bools, and the 0/1 or None a caller may pass
                raise UsageError(f"--{name} is on or off (True or False); received {value!r}")
            object.__setattr__(self, name, bool(value))
        modes = self.modes.split(",") if isinstance(self.modes, str) else self.modes
        if not isinstance(modes, (tuple, list)) or not modes:
            raise UsageError(f"modes must be a comma-separated string or a list of modes; received {self.modes!r}")
        modes = tuple(dict.fromkeys(parse_mode(m, allow_auto=False) for m in modes))
        object.__setattr__(self, "modes", modes)
        from ..threads import check

        object.__setattr__(self, "threads", check(self.threads))
