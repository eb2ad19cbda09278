"""The Keras side of the trainer callbacks: the pre-failure watch of ``ampkit.keras.MixedPrecision.callback()`` for ``model.fit``."""
