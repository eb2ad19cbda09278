"""Where a command runs: the device as a backend resolved it (framework-neutral)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """Where a command runs, as the backend resolved ``--device``.

    ``device``: the backend's own device string, which it turns back into a device object
    (``"cpu"``, ``"cuda:0"``; ``"CPU:0"``/``"GPU:0"`` in TensorFlow); ``accelerator``: a GPU rather
    than the CPU (decides the default workload and the CPU rules); ``label``: the ``device`` field
    of the reports."""

    device: str
    accelerator: bool
    label: str

    @property
    def kind(self) -> str:
        """``cpu`` or ``gpu``: how messages name the device (``a CPU device``)."""
        return "gpu" if self.accelerator else "cpu"
