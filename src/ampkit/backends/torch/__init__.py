"""The PyTorch backend: the engine (``ampkit.MixedPrecision``) and doctor, bench, parity and audit."""
