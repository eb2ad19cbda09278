"""What both engines (``ampkit.MixedPrecision`` for PyTorch, ``ampkit.keras.MixedPrecision``) answer
alike about the precision in force, written once: a mixin over their ``precision`` (a
:class:`~ampkit.precision.Precision`) and ``_fp8`` (the framework's fp8 preparation, or None)."""

from __future__ import annotations


class PrecisionFront:
    """``mode``, ``emulated`` and ``fp8_layers`` of an engine that sets ``precision`` and ``_fp8``."""

    precision: object
    _fp8: object

    @property
    def mode(self) -> str:
        """The mode in force (what ``"auto"`` resolved to)."""
        return self.precision.mode

    @property
    def emulated(self) -> bool:
        """True when fp8 runs emulated, without fp8 hardware (torchao's emulation; Keras's
        quantize-dequantize): numerics, not speed."""
        return bool(self._fp8 and self._fp8.emulated)

    @property
    def fp8_layers(self) -> list[dict]:
        """fp8: each layer fp8 would convert in the prepared model, ``{"name", "shape", "converted",
        "reason"}`` (torch: every Linear; Keras: every Dense/EinsumDense, with its ``"type"``); else []."""
        return list(self._fp8.layers) if self._fp8 else []

    def record(self, path: str | None = None, *, seed: int, model: str | None = None, data: str | None = None):
        """A :class:`~ampkit.runlog.RunLog` of this run in this engine's mode, for ``ampkit parity
        --runs``: call ``rec.step(loss)`` after each optimizer step, ``rec.evaluate(accuracy=...)``
        after an evaluation, and ``rec.save()`` at the end (or use it as a context manager).
        ``model``/``data`` name what trained, so that runs of different models are not compared."""
        from .runlog import RunLog

        return RunLog(path, mode=self.mode, seed=seed, model=model, data=data,
                      framework=getattr(self, "framework_name", None))
