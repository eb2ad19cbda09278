"""The PyTorch backend: the engine (``ampkit.MixedPrecision``) and doctor, bench, parity and audit.

Everything that imports torch lives in this folder; the drivers reach it through
:class:`~ampkit.backends.torch.backend.TorchBackend`, which :func:`ampkit.registry.get_backend` returns.
"""
