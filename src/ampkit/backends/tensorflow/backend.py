"""The TensorFlow/Keras backend: :class:`ampkit.backends.base.Backend`'s operations, one mixin per
command. Importing it imports no TensorFlow: every operation imports it when it runs."""

from __future__ import annotations

from ..base import Backend
from .bench import TensorFlowBench
from .doctor import TensorFlowDoctor
from .environment import TensorFlowEnvironment
from .parity import TensorFlowParity
from .whatif import TensorFlowWhatIfAudit


class TensorFlowBackend(TensorFlowEnvironment, TensorFlowDoctor, TensorFlowBench, TensorFlowParity, TensorFlowWhatIfAudit,
                        Backend):
    name = "tensorflow"

    def __init__(self) -> None:
        from .engine.keras_backends import refuse_cli_backend

        # Keras set to torch or JAX: one line now, before TensorFlow and that backend meet in one
        # process (TensorFlow with Keras's torch backend segfaults)
        refuse_cli_backend()
