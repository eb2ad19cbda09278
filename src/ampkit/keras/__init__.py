"""Mixed precision for Keras — Keras 3 (on TensorFlow, torch or JAX) or Keras 2 (``tf_keras``):
``ampkit.keras.MixedPrecision`` and friends."""

from ..backends.tensorflow.engine.mixed_precision import LossScaleHistory, MixedPrecision, float32_output, loss_scale_of
from ..backends.tensorflow.engine.policy import GlobalPolicyFound
from ..health import LossScaleWarning

__all__ = ["MixedPrecision", "LossScaleHistory", "float32_output", "loss_scale_of", "GlobalPolicyFound",
           "LossScaleWarning"]
