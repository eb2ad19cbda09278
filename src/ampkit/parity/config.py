"""What a parity run is asked to do."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError


@dataclass
class ParityConfig:
    dataset: str = "digits"
    modes: list[str] | None = None
    seeds: int = 3
    epochs: int | None = None
    tolerance: float = 0.01
    device: str = "auto"

    def validate(self) -> ParityConfig:
        if self.seeds < 1:
            raise UsageError(f"--seeds must be >= 1; received {self.seeds}")
        if self.epochs is not None and self.epochs < 1:
            raise UsageError(f"--epochs must be >= 1; received {self.epochs}")
        if not (0 <= self.tolerance < 1):
            raise UsageError(f"--tolerance is an absolute accuracy in [0, 1); received {self.tolerance}")
        return self
