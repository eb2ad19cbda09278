"""The TensorFlow/Keras backend: doctor, bench, parity and audit for Keras 3 on TensorFlow.

Everything here imports TensorFlow (lazily, inside the functions), never torch. Importing this
package quiets TensorFlow's C++ logs unless the user chose a level, so the cuInit/oneDNN notices
of CPU machines do not drown the reports.
"""

from __future__ import annotations

import os

from ...errors import UsageError

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _device_check(device: str) -> None:
    """TensorFlow places ops itself: accept auto, cpu and cuda[:0] (its GPU:0), refuse the rest."""
    from .common import import_tf

    text = (device or "auto").strip().lower()
    if text in ("auto", "cpu"):
        if text == "cpu":
            import_tf().config.set_visible_devices([], "GPU")
        return
    if text in ("cuda", "cuda:0", "gpu"):
        if not import_tf().config.list_physical_devices("GPU"):
            raise UsageError(f"device {device!r} asked for, but TensorFlow sees no GPU; use --device cpu")
        return
    raise UsageError(f"--framework tensorflow supports --device auto, cpu or cuda (GPU:0); received {device!r}")


class TensorFlowBackend:
    name = "tensorflow"

    def doctor(self, device, *, quick: bool = False, progress=None):
        from . import doctor

        _device_check(device)
        return doctor.run(quick=quick, progress=progress)

    def bench(self, config, *, progress=None, on_row=None):
        from .bench import run_bench_tf

        _device_check(config.device)
        return run_bench_tf(config, progress=progress, on_row=on_row)

    def parity(self, config, *, progress=None):
        from .parity import run_parity_tf

        _device_check(config.device)
        return run_parity_tf(config, progress=progress)

    def audit(self, config):
        from .audit import audit_from_config_tf

        _device_check(config.device)
        return audit_from_config_tf(config)
