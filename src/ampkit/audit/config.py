"""What an audit run is asked to do."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class AuditConfig:
    workload: str | None = None
    model: str | None = None
    input_shape: tuple[int, ...] | None = None
    num_classes: int | None = None   # None: what the model declares (Keras), else 10
    mode: str = "fp16"
    steps: int = 1
    loss_scale: float | None = None
    batch_size: int | None = None
    device: str = "auto"
    seed: int = 0
