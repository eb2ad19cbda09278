"""The TensorFlow/Keras backend: :class:`ampkit.backends.base.Backend`'s operations, one mixin per
command. Importing it imports no TensorFlow: every operation imports it when it runs."""

from __future__ import annotations

from .audit import TensorFlowAudit
from .bench import TensorFlowBench
from .common import TensorFlowEnvironment
from .doctor import TensorFlowDoctor
from .parity import TensorFlowParity


class TensorFlowBackend(TensorFlowEnvironment, TensorFlowDoctor, TensorFlowBench, TensorFlowParity, TensorFlowAudit):
    name = "tensorflow"
