from __future__ import annotations

import pytest


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def _has_tensorflow() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorflow") is not None


def pytest_collection_modifyitems(config, items):
    no_cuda = pytest.mark.skip(reason="needs a CUDA device")
    no_tf = pytest.mark.skip(reason="needs TensorFlow (pip install 'ampkit[tensorflow]')")
    cuda, tf = _has_cuda(), _has_tensorflow()
    for item in items:
        if "gpu" in item.keywords and not cuda:
            item.add_marker(no_cuda)
        if "tensorflow" in item.keywords and not tf:
            item.add_marker(no_tf)
