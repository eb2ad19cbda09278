"""The Keras engine, ``ampkit.keras.MixedPrecision`` (public as :mod:`ampkit.keras`): one module per concept."""
