"""Mixed precision for Keras 3 (TensorFlow backend): ``ampkit.keras.MixedPrecision`` and friends.

Importing this module imports Keras; ``import ampkit`` does not.
"""

from .engine import LossScaleHistory, MixedPrecision, float32_output, loss_scale_of

__all__ = ["MixedPrecision", "LossScaleHistory", "float32_output", "loss_scale_of"]
