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

    # ---- whole commands, until each command's neutral driver replaces them (issue #21)
    def doctor(self, device, *, quick: bool = False, progress=None):
        from . import doctor

        self.target(device)
        return doctor.run(quick=quick, progress=progress)

    def bench(self, config, *, progress=None, on_row=None):
        from .bench import run_bench_tf

        self.target(config.device)
        return run_bench_tf(config, progress=progress, on_row=on_row)

    def parity(self, config, *, progress=None):
        from .parity import run_parity_tf

        self.target(config.device)
        return run_parity_tf(config, progress=progress)

    def audit(self, config):
        from .audit import audit_from_config_tf

        self.target(config.device)
        return audit_from_config_tf(config)
