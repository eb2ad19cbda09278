"""The interface every framework backend provides to the commands."""

from __future__ import annotations

from typing import Protocol


class Backend(Protocol):
    name: str

    def doctor(self, device, *, quick: bool = False, progress=None): ...

    def bench(self, config, *, progress=None): ...

    def parity(self, config, *, progress=None): ...

    def audit(self, config): ...
