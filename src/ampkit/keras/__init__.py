"""Mixed precision for Keras on TensorFlow — Keras 3 or Keras 2 (``tf_keras``): ``ampkit.keras.MixedPrecision`` and friends.

The public name of :mod:`ampkit.backends.tensorflow.keras_engine`. Importing this module imports
Keras; ``import ampkit`` does not.
"""

from ..backends.tensorflow.keras_engine import LossScaleHistory, MixedPrecision, float32_output, loss_scale_of

__all__ = ["MixedPrecision", "LossScaleHistory", "float32_output", "loss_scale_of"]
