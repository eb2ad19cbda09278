"""The TensorFlow/Keras backend: the commands' entry points for TensorFlow (imported lazily)."""

from __future__ import annotations

from ..errors import UsageError


def _device_check(device: str) -> None:
    """TensorFlow places ops itself: accept auto, cpu and cuda[:0] (its GPU:0), refuse the rest."""
    from ..tf.common import import_tf

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
        from ..tf import doctor

        _device_check(device)
        return doctor.run(quick=quick, progress=progress)

    def bench(self, config, *, progress=None, on_row=None):
        from ..tf.bench import run_bench_tf

        _device_check(config.device)
        return run_bench_tf(config, progress=progress, on_row=on_row)

    def parity(self, config, *, progress=None):
        from ..tf.parity import run_parity_tf

        _device_check(config.device)
        return run_parity_tf(config, progress=progress)

    def audit(self, config):
        from ..tf.audit import audit_from_config_tf

        _device_check(config.device)
        return audit_from_config_tf(config)
